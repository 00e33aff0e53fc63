"""The slate head: a page of L items out of K drawn without replacement, with exact per-position
(marginal) and prefix (cascade) probabilities.

    probabilities     the numpy policies and their exact probabilities (numpy only: the
                      Evaluator's workers and the slate generator import it without TensorFlow)
    tf_probabilities  the same math in TensorFlow (float64; float32 builtins for LiteRT)
    head              the served decision: `slate_head` (SavedModel, ranking policies) and
                      `litert_slate_head` (the LiteRT file), their output names and seeds
    verifier          the Pusher's check of served pages against the exact probabilities
"""
