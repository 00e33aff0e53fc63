from rlops.agents.ppo.ppo_agent import PPOAgent, PPOClipAgent, PPOKLPenaltyAgent  # noqa: F401
