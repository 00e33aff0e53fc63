"""Agents registered by name, Acme-style: one module per agent (its options, a frozen dataclass
read from the trainer section; its builder, `build(options, inputs)`; and its SPEC: decision kind,
linear, per-arm, default batch size), one table (registry.AGENTS) that the Trainer and the config
loader ask instead of branching on names. Options shared by several agents live in their own
module (reward_network.py, linear.py); base.py holds AgentSpec and BuildInputs.

A new agent is its module here (e.g. `my_agent.py` with its options class, `build` and `SPEC`) and
its line in registry.py. Its options read the trainer section's keys in their `from_trainer`: a
key of its own is a TrainerConfig field (or a section, as trainer.ppo and trainer.ranking).
"""
