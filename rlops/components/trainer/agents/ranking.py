"""ranking: a RankingAgent (rlops.agents.ranking) trained offline on slate logs, scoring the K
candidates with the per-arm reward network (trainer.network, hidden_sizes, reward_loss,
learning_rate, weight_decay) and serving pages drawn by trainer.ranking's slate policy.
Options: RankingAgentOptions (the reward network's, agents/reward_network.py, plus trainer.ranking).

Defaults, and why:
- feedback `cascading` with reward_loss `sigmoid_cross_entropy` and non-click score 0: the slots
  above the first click are examined and not clicked (label 0), the clicked slot is 1, the slots
  below it are not trained on. That is the likelihood of the cascade click model, so the scores are
  logits of P(click | examined) and a greedy page orders the items by it (the best page under
  cascade and position-based clicks alike).
- slate policy `plackett_luce` at temperature 0.5 (in those logits' units): on the ranking
  pipeline's default world (K=10, L=3, a Plackett-Luce logger at temperature 2; true scores) it
  keeps 77% of the greedy page's gain over the logger, and its prefix weights keep an effective
  sample size of 13% of the pages, so the Evaluator can bless it from a few hundred eval pages.
  `epsilon_per_slot` at 0.1 keeps 92% of the gain, but its pages are nearly deterministic: an ESS
  of 19 per 1,000 pages (3 on pages of 4 of 12 items under a logger at temperature 1), under the
  gate's 30, so nothing can bless it, and tomorrow's logs would hardly explore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rlops.components.common.decision_kinds import SLATE
from rlops.components.trainer.agents.base import AgentSpec, BuildInputs
from rlops.components.trainer.agents.reward_network import RewardNetworkOptions

SLATE_POLICIES = ("plackett_luce", "epsilon_per_slot")
FEEDBACK = ("cascading", "score_vector")
BATCH_SIZE = 256  # slates per train step and replica


@dataclass(frozen=True)
class RankingOptions:
    """What the ranking agent learns from and what it serves (`trainer.ranking`)."""

    # The served page (serving_ranked): plackett_luce (Gumbel-top-L over scores / temperature) or
    # epsilon_per_slot (each slot the best remaining item, or with probability epsilon a uniform one).
    slate_policy: str = "plackett_luce"
    temperature: float = 0.5  # plackett_luce: lower is greedier (scores are logits with the log loss)
    epsilon: float = 0.1  # epsilon_per_slot: each slot's exploration
    # cascading: train on the slots down to the first click (those above it are non-clicks, those
    # below unseen); score_vector: every slot's reward is its target.
    feedback: str = "cascading"

    def validate(self) -> None:
        from rlops.components.json_config import closest

        for name, choices in (("slate_policy", SLATE_POLICIES), ("feedback", FEEDBACK)):
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"trainer.ranking.{name}: unknown value {value!r}; {closest(str(value), choices)}")
        if not self.temperature > 0:
            raise ValueError(f"trainer.ranking.temperature must be > 0, got {self.temperature}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"trainer.ranking.epsilon must be in [0, 1], got {self.epsilon}")

    @property
    def cascading(self) -> bool:
        """Trains on the slots down to the first click (the cascading feedback)."""
        return self.feedback == "cascading"

    def slate_policy_object(self) -> Any:
        """The numpy slate policy (rlops.heads.slate.probabilities) the served head draws from."""
        from rlops.heads.slate.probabilities import EpsilonPerSlot, PlackettLuce

        if self.slate_policy == "epsilon_per_slot":
            return EpsilonPerSlot(self.epsilon)
        return PlackettLuce(self.temperature)


@dataclass(frozen=True)
class RankingAgentOptions(RewardNetworkOptions):
    """ranking's options: its reward network's (trainer.hidden_sizes, network, reward_loss,
    learning_rate, weight_decay, average_weights, seed) and trainer.ranking."""

    ranking: RankingOptions = RankingOptions()
    """What it learns from (feedback) and what it serves (the slate policy)."""

    EXCLUSIVE_KEYS: ClassVar[dict[str, str]] = {
        **RewardNetworkOptions.EXCLUSIVE_KEYS,
        "ranking": "options for agent 'ranking', but agent is '{agent}'",
    }

    @classmethod
    def from_trainer(cls, section: Any) -> RankingAgentOptions:
        return cls(**cls.network_keys(section), ranking=section.ranking)

    def validate(self) -> None:
        super().validate()
        self.ranking.validate()


def ranking_specs(global_dim: int, num_items: int, num_slots: int, cascading: bool) -> tuple[Any, Any]:
    """(time step spec, action spec) of a page of `num_slots` of `num_items` candidates whose
    features are the global features and each item's one-hot index (rlops.features.item_index)."""
    import tensorflow as tf

    from rlops.agents import specs
    from rlops.agents.ranking.ranking_agent import CHOSEN_INDEX, CHOSEN_VALUE
    from rlops.agents.trajectories import time_step_spec

    observation = {
        "global": tf.TensorSpec((global_dim,), tf.float32, "global"),
        "per_arm": tf.TensorSpec((num_items, num_items), tf.float32, "per_arm"),
        "num_actions": specs.BoundedTensorSpec((), tf.int32, 1, num_items, name="num_actions"),
    }
    if cascading:
        reward: Any = {
            CHOSEN_INDEX: specs.BoundedTensorSpec((), tf.int32, 0, num_slots, name=CHOSEN_INDEX),
            CHOSEN_VALUE: tf.TensorSpec((), tf.float32, CHOSEN_VALUE),
        }
    else:
        reward = tf.TensorSpec((num_slots,), tf.float32, "reward")
    action = specs.BoundedTensorSpec((num_slots,), tf.int32, 0, num_items - 1, name="slate")
    return time_step_spec(observation, reward), action


def build(options: RankingAgentOptions, inputs: BuildInputs) -> Any:
    """A RankingAgent for a per-arm observation spec and a slate action spec ([L] item indices)."""
    from rlops.agents.ranking.ranking_agent import FeedbackModel, RankingAgent

    cascading = options.ranking.cascading
    return RankingAgent(
        inputs.time_step_spec,
        inputs.action_spec,
        options.per_arm_network(inputs.observation_spec),
        options.optimizer(),
        error_loss_fn=options.error_loss_fn(),
        feedback_model=FeedbackModel.CASCADING if cascading else FeedbackModel.SCORE_VECTOR,
        # log loss needs labels in [0, 1]: a non-click is 0 (TF-Agents' -1 suits squared error)
        non_click_score=(0.0 if options.log_loss else None) if cascading else None,
        collect_slate_policy=options.ranking.slate_policy_object(),
        train_step_counter=inputs.train_step,
    )


SPEC = AgentSpec("ranking", build, RankingAgentOptions, SLATE, per_arm=True, batch_size=BATCH_SIZE)
