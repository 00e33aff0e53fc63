"""The Trainer's typed config: which agent, its hyperparameters, the budget, the strategy.

A plain dataclass that round-trips through JSON (the TFX component passes it as an execution
property string, the KFP component as a string parameter). Unknown keys are errors that name
the key: a typo in a nightly job's config should fail before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Union

from rlops.components.json_config import JsonConfig, PartialOf, build, closest, convert
from rlops.components.trainer.agents import lin_ucb
from rlops.components.trainer.agents.base import PPO, RANKING, AgentSpec
from rlops.components.trainer.agents.ppo import PPOOfflineConfig
from rlops.components.trainer.agents.ranking import RankingOptions
from rlops.components.trainer.agents.registry import agent_spec

# PPOOfflineConfig (agents/ppo.py) and RankingOptions (agents/ranking.py): re-exported
__all__ = ["PPOOfflineConfig", "RankingOptions", "TrainerConfig"]

# A PPO option's value as YAML/JSON gives it (checked against PPOConfig's own hint per key).
PPOValue = Union[bool, int, float, str, list, dict, None]
# trainer.ppo: some of PPOConfig's fields, each checked against PPOConfig's type hint.
PPOOptions = Annotated[dict[str, PPOValue], PartialOf("rlops.train.on_policy:PPOConfig")]

NETWORKS = ("common_tower", "dot_product")  # trainer.network
REWARD_LOSSES = ("squared_error", "sigmoid_cross_entropy")  # trainer.reward_loss
LINEAR_BATCH_SIZE = lin_ucb.BATCH_SIZE  # default records per train step of lin_ucb / lin_ts (the tests' figure)

# The bandit pipeline's trainer defaults for per-arm logs (an item table: experience_gen.item_source)
# when trainer.agent is neural_epsilon_greedy (the default agent): a two-tower logistic network that
# personalises (user x item) and passes over EVERY record (num_epochs, no fixed step budget), chosen
# by measurement against the dense defaults and Vowpal Wabbit (benchmarks/defaults_vs_vw.py; the
# figures are in docs/benchmarks.md). Each applies only where the user's config leaves the key
# unset (`apply_per_arm_defaults`); `rlops config bandit` prints the result.
# reward_loss 'sigmoid_cross_entropy' is the log loss of 0/1 rewards (clicks): for other rewards set
# trainer.reward_loss: squared_error.
PER_ARM_DEFAULTS: dict[str, object] = {
    "network": "dot_product",  # a user tower and an item tower meeting in an embedding
    "hidden_sizes": [8],  # dot_product: the embedding's size
    "reward_loss": "sigmoid_cross_entropy",  # clicks are 0/1
    "weight_decay": 0.3,
    "learning_rate": 0.005,
    "batch_size": 1024,
    "num_epochs": 12,  # passes over the train split: the steps grow with the logs
    "average_weights": True,  # export the weights' moving average over about the last pass
}
PER_ARM_DEFAULT_AGENT = "neural_epsilon_greedy"  # the agent PER_ARM_DEFAULTS are for
# The ranking agent scores a page's candidates with the same network (the ranking pipeline's
# defaults), in batches of 256 pages: a page trains up to L slots, and on 20,000 generator pages
# (K=12, L=4) 256 gave 0.92 of the greedy page's gap to the best page, 1024 (a quarter of the steps) 0.88.
# Weight averaging was measured for single-item decisions only, so pages train as measured.
RANKING_DEFAULTS: dict[str, object] = {
    **{k: v for k, v in PER_ARM_DEFAULTS.items() if k != "average_weights"},
    "batch_size": 256,
}


def apply_per_arm_defaults(given: dict, default_agent: str = PER_ARM_DEFAULT_AGENT) -> dict:
    """The trainer section as given, with PER_ARM_DEFAULTS (agent ranking: RANKING_DEFAULTS) filled in
    where it leaves them unset (per-arm logs, agent neural_epsilon_greedy, or ranking; any other agent:
    as given). `default_agent`: the agent a section without `agent` trains. A given `network` other
    than dot_product keeps the network's own hidden_sizes default; a given train_steps (the old budget) keeps its meaning, the
    split repeating for that many steps, unless num_epochs is given too."""
    agent = given.get("agent", default_agent)
    if agent not in (PER_ARM_DEFAULT_AGENT, RANKING):
        return dict(given)
    out = dict(given)
    for key, value in (RANKING_DEFAULTS if agent == RANKING else PER_ARM_DEFAULTS).items():
        if key == "hidden_sizes" and given.get("network", PER_ARM_DEFAULTS["network"]) != PER_ARM_DEFAULTS["network"]:
            continue
        if key == "num_epochs" and given.get("train_steps") is not None:
            continue
        out.setdefault(key, value)
    return out


def linear_per_arm_note(agent: str) -> str | None:
    """Why a linear agent (lin_ucb, lin_ts) over per-arm features cannot personalise, or None for
    another agent: its one linear score over concat(user, item) features adds a user part and an item
    part, so every user gets the same greedy item order (the user's part shifts every item's score
    alike): on click logs it serves one item to everybody."""
    from rlops.components.trainer.agents.registry import AGENTS

    if agent not in AGENTS or not AGENTS[agent].linear:  # an unknown name: TrainerConfig says so
        return None
    return (
        f"trainer.agent: '{agent}' over per-arm features scores concat(user, item) linearly, which cannot "
        "express user x item taste (every user gets the same greedy item order); for personalised choices leave "
        f"trainer.agent at '{PER_ARM_DEFAULT_AGENT}' (per-arm default: a two-tower dot_product network)"
    )


@dataclass
class TrainerConfig(JsonConfig):
    SECTION = "trainer"

    # The agent. Per-arm logs (an item table): neural_epsilon_greedy gets PER_ARM_DEFAULTS (a two-tower
    # network over every record); lin_ucb / lin_ts score concat(user, item) features linearly, so every
    # user gets the same greedy item order (no user x item taste; the loader warns).
    agent: str = "neural_epsilon_greedy"
    # Bandits (offline, from an Examples artifact of bandit feedback).
    num_actions: int | None = None
    # The first action id: logged actions (and the exported policy's) are action_minimum ..
    # action_minimum + num_actions - 1, the Examples' action_spec (e.g. ids that start at 1).
    action_minimum: int = 0
    # Layer widths of the reward network (neural_epsilon_greedy, ranking); PPO: trainer.ppo.hidden_sizes
    hidden_sizes: tuple[int, ...] = (64,)
    # neural_epsilon_greedy with per-arm features: the reward network. 'common_tower': one MLP
    # (hidden_sizes) over concat(global, arm features). 'dot_product': a global tower and an arm
    # tower (hidden_sizes each; the last entry is the embedding size, a linear layer) whose dot
    # product, plus a linear score of each side, scores an arm (TF-Agents'
    # GlobalAndArmDotProductNetwork): the shape of a low-rank user x item click model.
    network: str = "common_tower"
    # neural_epsilon_greedy: the error loss on the taken action's predicted reward (TF-Agents'
    # error_loss_fn). 'sigmoid_cross_entropy' is for 0/1 rewards (clicks): the network's predicted
    # rewards are then logits, not rewards; the greedy action (argmax) is the same as over
    # probabilities.
    reward_loss: str = "squared_error"
    # Adam's step size for the reward network (neural_epsilon_greedy, ranking); PPO: trainer.ppo.learning_rate
    learning_rate: float = 1e-3
    # neural_epsilon_greedy: decoupled weight decay on the reward network (Adam's weight_decay:
    # each step also shrinks every weight by learning_rate x weight_decay of itself), an L2-like
    # pull towards 0 for small, repeated logs. 0: none, TF-Agents' agent and numbers.
    weight_decay: float = 0.0
    # neural_epsilon_greedy / ranking: export the reward network's weights averaged over about the
    # last pass of training (an exponential moving average, at most 100 steps long; trainer/averaging.py)
    # instead of the last step's, which carry the noise of the last few batches. False: the last
    # step's, TF-Agents' agent and numbers.
    average_weights: bool = False
    epsilon: float = 0.1  # collect (logging) policy's exploration
    serving_epsilon: float | None = None  # serving_default's exploration (None: epsilon)
    # Logged action masks (an `action_mask` column) are honoured by default: the agent is built with
    # TF-Agents' observation_and_action_constraint_splitter and the exported policy takes the mask
    # as part of its observation (trainer/masks.py). True trains and exports without the mask.
    ignore_action_mask: bool = False
    alpha: float = 1.0  # LinUCB / LinTS exploration width
    # LinUCB / LinTS warm start: A = f * A_base + sum x x^T, b = f * b_base + sum r x over the new
    # split (1.0: the base model's statistics count in full; < 1 discounts older days once per run).
    forgetting_factor: float = 1.0
    # Records per train step and replica; None: the agent's default (its AgentSpec.batch_size: 4096
    # for lin_ucb and lin_ts, whose closed-form sums gain from big batches; 32 for the network).
    # The last batch of a pass may be smaller: every record trains.
    batch_size: int | None = None
    # Passes over the train split. None: one pass for lin_ucb / lin_ts (their statistics are sums
    # over the records: two passes count every record twice); neural_epsilon_greedy repeats the
    # split for train_steps steps (NEURAL_TRAIN_STEPS when unset), the budget before passes existed.
    num_epochs: int | None = None
    # An optional cap on train steps (None: no cap, the passes decide); 0 with a base model:
    # re-export the warm-started model as is.
    train_steps: int | None = None
    # Neural agents: a train split up to this many bytes of model inputs (per worker) is read,
    # parsed and encoded once and held in memory, each pass a fresh seeded permutation of it; a
    # larger one streams from the files every pass, shuffled in a buffer of 10 batches. 0: stream.
    in_memory_bytes: int = 1 << 30
    # PPO: PPOConfig fields, e.g. {"env_id": "CartPole-v1"}. Online (no examples input) it needs
    # env_id; offline (logged trajectories) it takes the hyperparameters, and env_id is optional
    # (it only supplies the specs). num_actions above sizes a discrete action the logs leave open.
    # Kept as the options given (unset ones default in PPOConfig, seed from `seed` below), each
    # checked against PPOConfig's type hints.
    ppo: PPOOptions = field(default_factory=dict)
    # PPO offline: batch of windows, window length, passes over the data.
    ppo_offline: PPOOfflineConfig = field(default_factory=PPOOfflineConfig)
    # Ranking (slate logs): the served page's policy and the feedback trained on. The network, its
    # loss and the budget are the fields above (the ranking pipeline's defaults: PER_ARM_DEFAULTS).
    ranking: RankingOptions = field(default_factory=RankingOptions)
    # Learner.
    strategy: str = "auto"
    steps_per_run: int = 100  # train steps per tf.function call
    # Train steps between checkpoints (checked after each steps_per_run call); a restarted Trainer resumes from the last
    checkpoint_interval: int = 500
    # Train steps between TensorBoard summaries (written at steps divisible by it); <= 0: none
    summary_interval: int = 100
    max_checkpoints_to_keep: int = 3  # how many of the most recent checkpoints stay on disk
    # Seeds network initialisation, data shuffling and TF's global RNG (PPO: trainer.ppo's seed unless given there)
    seed: int = 0

    def __post_init__(self):
        self.hidden_sizes = tuple(self.hidden_sizes)
        if isinstance(self.ppo_offline, dict):  # the Python API's {"batch_size": 8} form
            self.ppo_offline = build(PPOOfflineConfig, self.ppo_offline, "trainer.ppo_offline")
        if isinstance(self.ranking, dict):
            self.ranking = build(RankingOptions, self.ranking, "trainer.ranking")
        self.validate()

    def validate(self) -> None:
        spec = agent_spec(self.agent)  # unknown: one line with the closest names
        if spec.is_bandit and (self.num_actions is None or self.num_actions < 2):
            raise ValueError(
                f"trainer.num_actions: bandit agent '{self.agent}' needs num_actions >= 2, got {self.num_actions}"
            )
        if not 0.0 < self.forgetting_factor <= 1.0:
            raise ValueError(f"trainer.forgetting_factor must be in (0, 1], got {self.forgetting_factor}")
        if self.forgetting_factor != 1.0 and not spec.linear:
            raise ValueError(
                f"trainer.forgetting_factor: discounts LinUCB / LinTS statistics at warm start; agent "
                f"'{self.agent}' has none (leave it at 1.0)"
            )
        self._validate_reward_network(spec)
        if self.serving_epsilon is not None and not 0.0 <= self.serving_epsilon <= 1.0:
            raise ValueError(f"trainer.serving_epsilon must be in [0, 1], got {self.serving_epsilon}")
        for name in ("batch_size", "num_epochs", "steps_per_run"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        if self.in_memory_bytes < 0:
            raise ValueError(f"trainer.in_memory_bytes must be >= 0 (0: stream every pass), got {self.in_memory_bytes}")
        if self.train_steps is not None and self.train_steps < 0:  # 0: warm start and re-export only
            raise ValueError(f"trainer.train_steps must be >= 0, got {self.train_steps}")
        if spec.pipeline == PPO:
            convert(PPOOptions, self.ppo, "trainer.ppo", make=False)  # the Python API skips build()
            self.offline_ppo.validate()
            if self.num_actions is not None and self.num_actions < 2:
                raise ValueError(f"trainer.num_actions: needs >= 2 actions, got {self.num_actions}")
        elif self.ppo_offline != PPOOfflineConfig():
            raise ValueError(f"trainer.ppo_offline: options for agent 'ppo', but agent is '{self.agent}'")
        if spec.pipeline == RANKING:
            self.ranking.validate()
        elif self.ranking != RankingOptions():
            raise ValueError(f"trainer.ranking: options for agent 'ranking', but agent is '{self.agent}'")

    def _validate_reward_network(self, spec: AgentSpec) -> None:
        """network / reward_loss: a known choice, and only for an agent that trains a reward network."""
        for name, choices, default in (
            ("network", NETWORKS, "common_tower"),
            ("reward_loss", REWARD_LOSSES, "squared_error"),
        ):
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"trainer.{name}: unknown value {value!r}; {closest(str(value), choices)}")
            if value != default and not spec.reward_network:
                raise ValueError(
                    f"trainer.{name}: chooses the agent's reward network; agent '{self.agent}' has "
                    f"none (leave it at '{default}')"
                )
        if self.weight_decay < 0:
            raise ValueError(f"trainer.weight_decay must be >= 0, got {self.weight_decay}")
        if self.weight_decay and not spec.reward_network:
            raise ValueError(
                f"trainer.weight_decay: decays the agent's reward network; agent '{self.agent}' has none (leave it at 0)"
            )
        if self.average_weights and not spec.reward_network:
            raise ValueError(
                f"trainer.average_weights: averages the agent's reward network; agent '{self.agent}' has none "
                "(leave it at false)"
            )
        if self.network == "dot_product" and not self.hidden_sizes:
            raise ValueError("trainer.hidden_sizes: network 'dot_product' needs at least one size (the embedding's)")

    def check_inputs(self, has_examples: bool) -> None:
        """PPO trains online without examples: that needs an environment to act in."""
        if self.registered.pipeline == PPO and not has_examples and not self.ppo.get("env_id"):
            raise ValueError(
                "trainer.ppo.env_id: PPO without an examples input trains online and needs a "
                "Gymnasium environment id (or give logged trajectories as examples)"
            )
        if self.registered.pipeline != PPO and not has_examples:
            raise ValueError(f"trainer: agent '{self.agent}' trains offline and needs an examples input")

    @property
    def offline_ppo(self) -> PPOOfflineConfig:
        return self.ppo_offline

    @property
    def exploration_epsilon(self) -> float:
        """What the served policy explores with (serving_default's epsilon-greedy)."""
        return self.epsilon if self.serving_epsilon is None else self.serving_epsilon

    @property
    def registered(self) -> AgentSpec:
        """The registered agent this config trains."""
        return agent_spec(self.agent)

    @property
    def is_bandit(self) -> bool:
        return self.registered.is_bandit

    @property
    def train_batch_size(self) -> int:
        """Records per train step and replica: batch_size, or the agent's default."""
        if self.batch_size is not None:
            return self.batch_size
        return self.registered.batch_size

    @property
    def epochs(self) -> int | None:
        """Passes over the train split; None: repeat it (an agent that repeats, e.g.
        neural_epsilon_greedy, without num_epochs)."""
        if self.num_epochs is not None:
            return self.num_epochs
        return None if self.registered.repeat_steps else 1

    @property
    def max_train_steps(self) -> int | None:
        """The cap on train steps: train_steps, else the neural budget when the split repeats."""
        if self.train_steps is not None:
            return self.train_steps
        return self.registered.repeat_steps if self.epochs is None else None
