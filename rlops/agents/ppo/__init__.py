from rlops.agents.ppo.ppo_agent import PPOAgent, PPOClipAgent, PPOKLPenaltyAgent, PPOLossInfo
from rlops.agents.ppo.ppo_policy import PPOCollectPolicy

__all__ = ["PPOAgent", "PPOClipAgent", "PPOKLPenaltyAgent", "PPOLossInfo", "PPOCollectPolicy"]
