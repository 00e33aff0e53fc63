"""The Trainer's typed config: which agent, its hyperparameters, the budget, the strategy.

A plain dataclass that round-trips through JSON (the TFX component passes it as an execution
property string, the KFP component as a string parameter). Unknown keys are errors that name
the key: a typo in a nightly job's config should fail before anything runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rlops.components.json_config import JsonConfig, build
from rlops.components.trainer.agents.base import AgentSpec
from rlops.components.trainer.agents.linear import LinearOptions
from rlops.components.trainer.agents.neural_epsilon_greedy import NeuralEpsilonGreedyOptions
from rlops.components.trainer.agents.ppo import PPOOfflineConfig, PPOSection
from rlops.components.trainer.agents.ranking import RankingOptions
from rlops.components.trainer.agents.registry import AGENTS, agent_spec
from rlops.components.trainer.agents.reward_network import RewardNetworkOptions
from rlops.components.trainer.kinds import KIND_FACTS

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
    # The published policy's exploration: 0.1 uniformly over 34 items caps a served policy at 0.82
    # of the way from the logger to the optimum; the Evaluator certifies more where a candidate needs
    # it to be judged (evaluator.serving_epsilons). Measured in docs/benchmarks.md, "Closed loop".
    "serving_epsilon": 0.05,
}
PER_ARM_DEFAULT_AGENT = "neural_epsilon_greedy"  # the agent PER_ARM_DEFAULTS are for
# The ranking agent scores a page's candidates with the same network (the ranking pipeline's
# defaults), in batches of 256 pages: a page trains up to L slots, and on 20,000 generator pages
# (K=12, L=4) 256 gave 0.92 of the greedy page's gap to the best page, 1024 (a quarter of the steps) 0.88.
# Weight averaging was measured for single-item decisions only, so pages train as measured.
RANKING_DEFAULTS: dict[str, object] = {
    **{k: v for k, v in PER_ARM_DEFAULTS.items() if k not in ("average_weights", "serving_epsilon")},
    "batch_size": 256,
}
# The agents whose per-arm defaults apply_per_arm_defaults fills in, and those defaults.
_PER_ARM_DEFAULTS_OF: dict[str, dict[str, object]] = {
    PER_ARM_DEFAULT_AGENT: PER_ARM_DEFAULTS,
    "ranking": RANKING_DEFAULTS,
}


def apply_per_arm_defaults(given: dict, default_agent: str = PER_ARM_DEFAULT_AGENT) -> dict:
    """The trainer section as given, with PER_ARM_DEFAULTS (agent ranking: RANKING_DEFAULTS) filled in
    where it leaves them unset (per-arm logs, agent neural_epsilon_greedy, or ranking; any other agent:
    as given). `default_agent`: the agent a section without `agent` trains. A given `network` other
    than dot_product keeps the network's own hidden_sizes default; a given train_steps (the old budget) keeps its meaning, the
    split repeating for that many steps, unless num_epochs is given too."""
    defaults = _PER_ARM_DEFAULTS_OF.get(given.get("agent", default_agent))
    if defaults is None:
        return dict(given)
    out = dict(given)
    for key, value in defaults.items():
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
    if agent not in AGENTS or not AGENTS[agent].linear:  # an unknown name: TrainerConfig says so
        return None
    return (
        f"trainer.agent: '{agent}' over per-arm features scores concat(user, item) linearly, which cannot "
        "express user x item taste (every user gets the same greedy item order); for personalised choices leave "
        f"trainer.agent at '{PER_ARM_DEFAULT_AGENT}' (per-arm default: a two-tower dot_product network)"
    )


@dataclass
class TrainerConfig(JsonConfig):
    """The trainer section: the agent, its options, the budget and the Learner. Each key's
    description names the agents that read it (none named: every agent); each agent's options
    class, beside its builder in trainer/agents/, reads its keys from here and checks their values.
    A reward-network key (network, reward_loss, weight_decay, average_weights), forgetting_factor,
    ppo_offline or ranking set for an agent that does not read it is an error."""

    SECTION = "trainer"

    # The agent. Per-arm logs (an item table): neural_epsilon_greedy gets PER_ARM_DEFAULTS (a two-tower
    # network over every record); lin_ucb / lin_ts score concat(user, item) features linearly, so every
    # user gets the same greedy item order (no user x item taste; the loader warns).
    agent: str = "neural_epsilon_greedy"
    # Bandit agents (offline, from an Examples artifact of bandit feedback): the number of actions (>= 2).
    # ppo: optional, it sizes a discrete action the logs leave open.
    num_actions: int | None = None
    # Bandit agents: the first action id: logged actions (and the exported policy's) are action_minimum ..
    # action_minimum + num_actions - 1, the Examples' action_spec (e.g. ids that start at 1).
    action_minimum: int = 0
    # neural_epsilon_greedy, ranking: layer widths of the reward network; PPO: trainer.ppo.hidden_sizes
    hidden_sizes: tuple[int, ...] = RewardNetworkOptions.hidden_sizes
    # neural_epsilon_greedy, ranking, with per-arm features: the reward network. 'common_tower': one MLP
    # (hidden_sizes) over concat(global, arm features). 'dot_product': a global tower and an arm
    # tower (hidden_sizes each; the last entry is the embedding size, a linear layer) whose dot
    # product, plus a linear score of each side, scores an arm (TF-Agents'
    # GlobalAndArmDotProductNetwork): the shape of a low-rank user x item click model.
    network: str = RewardNetworkOptions.network
    # neural_epsilon_greedy, ranking: the error loss on the taken action's predicted reward (TF-Agents'
    # error_loss_fn). 'sigmoid_cross_entropy' is for 0/1 rewards (clicks): the network's predicted
    # rewards are then logits, not rewards; the greedy action (argmax) is the same as over
    # probabilities.
    reward_loss: str = RewardNetworkOptions.reward_loss
    # neural_epsilon_greedy, ranking: Adam's step size for the reward network; PPO: trainer.ppo.learning_rate
    learning_rate: float = RewardNetworkOptions.learning_rate
    # neural_epsilon_greedy, ranking: decoupled weight decay on the reward network (Adam's weight_decay:
    # each step also shrinks every weight by learning_rate x weight_decay of itself), an L2-like
    # pull towards 0 for small, repeated logs. 0: none, TF-Agents' agent and numbers.
    weight_decay: float = RewardNetworkOptions.weight_decay
    # neural_epsilon_greedy, ranking: export the reward network's weights averaged over about the
    # last pass of training (an exponential moving average, at most 100 steps long; trainer/averaging.py)
    # instead of the last step's, which carry the noise of the last few batches. False: the last
    # step's, TF-Agents' agent and numbers.
    average_weights: bool = RewardNetworkOptions.average_weights
    # neural_epsilon_greedy: the collect (logging) policy's exploration
    epsilon: float = NeuralEpsilonGreedyOptions.epsilon
    # Bandit agents: serving_default's exploration (None: epsilon)
    serving_epsilon: float | None = None
    # Bandit agents: logged action masks (an `action_mask` column) are honoured by default: the agent is
    # built with TF-Agents' observation_and_action_constraint_splitter and the exported policy takes
    # the mask as part of its observation (trainer/masks.py). True trains and exports without the mask.
    ignore_action_mask: bool = False
    alpha: float = LinearOptions.alpha  # lin_ucb, lin_ts: exploration width
    # lin_ucb, lin_ts: warm start: A = f * A_base + sum x x^T, b = f * b_base + sum r x over the new
    # split (1.0: the base model's statistics count in full; < 1 discounts older days once per run).
    forgetting_factor: float = LinearOptions.forgetting_factor
    # Records per train step and replica; None: the agent's default (its AgentSpec.batch_size: 4096
    # for lin_ucb and lin_ts, whose closed-form sums gain from big batches; 32 for the network).
    # The last batch of a pass may be smaller: every record trains.
    batch_size: int | None = None
    # Passes over the train split. None: one pass for lin_ucb / lin_ts (their statistics are sums
    # over the records: two passes count every record twice); neural_epsilon_greedy repeats the
    # split for train_steps steps (its TRAIN_STEPS, 2000, when unset), the budget before passes existed.
    num_epochs: int | None = None
    # An optional cap on train steps (None: no cap, the passes decide); 0 with a base model:
    # re-export the warm-started model as is.
    train_steps: int | None = None
    # Neural agents: a train split up to this many bytes of model inputs (per worker) is read,
    # parsed and encoded once and held in memory; a larger one is encoded once into an on-disk cache
    # (disk_cache, cache_dir) and read back every pass. Either way each pass is the same seeded
    # order (blocks of 4,096 records permuted, then records permuted within windows of 16 blocks).
    # 0: stream from the Examples every pass, shuffled in a buffer of 10 batches. 256 MiB: the cache
    # trains as fast as the held split (docs/benchmarks.md), so holding more only costs memory.
    in_memory_bytes: int = 256 << 20
    # Neural agents: a train split larger than in_memory_bytes is encoded once into a cache on local
    # disk and each pass reads it (at the held split's rate, in memory that does not grow with the
    # split); False streams it from the Examples every pass instead (several times slower per record).
    disk_cache: bool = True
    # Neural agents: the local folder for disk_cache ('': the system's temp dir). The cache takes
    # about the held size (some 600 bytes a per-arm record); a preempted run in the same model
    # directory reads it again, a finished one removes it.
    cache_dir: str = ""
    # ppo: PPOConfig fields, e.g. {"env_id": "CartPole-v1"}. Online (no examples input) it needs
    # env_id; offline (logged trajectories) it takes the hyperparameters, and env_id is optional
    # (it only supplies the specs). num_actions above sizes a discrete action the logs leave open.
    # Kept as the options given (unset ones default in PPOConfig, seed from `seed` below), each
    # checked against PPOConfig's type hints.
    ppo: PPOSection = field(default_factory=dict)
    # ppo, offline: batch of windows, window length, passes over the data.
    ppo_offline: PPOOfflineConfig = field(default_factory=PPOOfflineConfig)
    # ranking (slate logs): the served page's policy and the feedback trained on. The network, its
    # loss and the budget are the fields above (the ranking pipeline's defaults: RANKING_DEFAULTS).
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
        if KIND_FACTS[spec.kind].sized_by_num_actions and (self.num_actions is None or self.num_actions < 2):
            raise ValueError(
                f"trainer.num_actions: bandit agent '{self.agent}' needs num_actions >= 2, got {self.num_actions}"
            )
        self._refuse_keys_of_other_agents(spec)
        spec.options_from(self).validate()  # the agent's own keys
        if self.serving_epsilon is not None and not 0.0 <= self.serving_epsilon <= 1.0:
            raise ValueError(f"trainer.serving_epsilon must be in [0, 1], got {self.serving_epsilon}")
        for name in ("batch_size", "num_epochs", "steps_per_run"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        if self.in_memory_bytes < 0:
            raise ValueError(f"trainer.in_memory_bytes must be >= 0 (0: stream every pass), got {self.in_memory_bytes}")
        if self.train_steps is not None and self.train_steps < 0:  # 0: warm start and re-export only
            raise ValueError(f"trainer.train_steps must be >= 0, got {self.train_steps}")

    def _refuse_keys_of_other_agents(self, spec: AgentSpec) -> None:
        """A key only other agents' options read (their EXCLUSIVE_KEYS), set away from its default,
        would change nothing: an error naming the agent."""
        own = spec.options_class.EXCLUSIVE_KEYS
        for other in AGENTS.values():
            for key, why in other.options_class.EXCLUSIVE_KEYS.items():
                if key not in own and getattr(self, key) != _default(key):
                    raise ValueError(f"trainer.{key}: {why.format(agent=self.agent)}")

    def check_inputs(self, has_examples: bool) -> None:
        """Without examples only an agent of an online kind trains: PPO, in trainer.ppo.env_id's environment."""
        if has_examples:
            return
        if not KIND_FACTS[self.registered.kind].online:
            raise ValueError(f"trainer: agent '{self.agent}' trains offline and needs an examples input")
        if not self.ppo.get("env_id"):
            raise ValueError(
                "trainer.ppo.env_id: PPO without an examples input trains online and needs a "
                "Gymnasium environment id (or give logged trajectories as examples)"
            )

    @property
    def exploration_epsilon(self) -> float:
        """What the served policy explores with (serving_default's epsilon-greedy)."""
        return self.epsilon if self.serving_epsilon is None else self.serving_epsilon

    @property
    def registered(self) -> AgentSpec:
        """The registered agent this config trains."""
        return agent_spec(self.agent)

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


def _default(name: str) -> object:
    """TrainerConfig's default for the key `name` (made afresh where it has a default_factory)."""
    f = {f.name: f for f in dataclasses.fields(TrainerConfig)}[name]
    return f.default_factory() if callable(f.default_factory) else f.default
