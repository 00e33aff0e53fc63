from rlops.agents.ppo.ppo_agent import PPOAgent, PPOClipAgent, PPOKLPenaltyAgent, PPOLossInfo

__all__ = ["PPOAgent", "PPOClipAgent", "PPOKLPenaltyAgent", "PPOLossInfo"]
