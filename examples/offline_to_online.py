"""Offline to online, RLPD-style: import a Minari dataset, fine-tune online with half of every batch drawn
uniformly from the offline data and half by priority from fresh episodes, then grow the dataset to keep
the tuned policy's episodes.

1. a small Minari dataset is made here (random CartPole, no download) and imported (``import_minari``);
2. online episodes are recorded while training (``RecordEpisodes`` into a ring: no end to the run);
3. a tiny Q-network trains on ``MixedSampler`` batches (uniform offline 50%, prioritized online 50%),
   sending |TD error| back with ``mixed.update_priorities(batch, ...)`` (the online rows' only);
4. the imported store is grown (``buffer.grow``) and takes the tuned policy's episodes.

    python examples/offline_to_online.py [folder]
"""

import os
import sys
import tempfile
from pathlib import Path

import gymnasium
import numpy as np
import torch

from memmap_replay import MixedSampler, ReplayBuffer
from memmap_replay.interop import import_minari
from memmap_replay.recording import RecordEpisodes

GAMMA = 0.99


def make_dataset(dataset_id: str, episodes: int) -> None:
    """A Minari dataset of random CartPole episodes (the offline data: made here, nothing is downloaded)."""
    import minari
    from minari.data_collector import EpisodeBuffer

    env = gymnasium.make("CartPole-v1")
    env.action_space.seed(0)
    buffers = []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
        while True:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs), actions.append(action), rewards.append(reward)
            terminations.append(terminated), truncations.append(truncated)
            if terminated or truncated:
                break
        buffers.append(EpisodeBuffer(seed=seed, observations=np.array(observations), actions=np.array(actions),
                                     rewards=np.array(rewards), terminations=np.array(terminations),
                                     truncations=np.array(truncations)))
    minari.create_dataset_from_buffers(dataset_id, buffers, env="CartPole-v1", eval_env="CartPole-v1",
                                       algorithm_name="random", author="example", author_email="a@example.org",
                                       code_permalink="https://example.org", description="random CartPole")


def play(env, q: torch.nn.Module, episodes: int, epsilon: float, rng: np.random.Generator, seed: int) -> list:
    """Episodes of an epsilon-greedy policy; their returns."""
    returns = []
    for number in range(episodes):
        obs, _ = env.reset(seed=seed + number)
        total, done = 0.0, False
        while not done:
            if rng.random() < epsilon:
                action = int(rng.integers(2))
            else:
                with torch.no_grad():
                    action = int(q(torch.as_tensor(obs)).argmax())
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return returns


def main(folder: Path) -> None:
    os.environ["MINARI_DATASETS_PATH"] = str(folder / "minari")  # the dataset stays inside the folder
    make_dataset("cartpole/random-v0", episodes=30)
    report = import_minari("cartpole/random-v0", folder / "offline", overwrite=True)
    offline = ReplayBuffer.from_folder(folder / "offline")
    print(f"imported: {report.episodes} episodes, {report.steps} steps, meta fields {list(offline.schema.meta_fields)}")

    # online episodes go into a ring: a run of any length never fills it (the oldest episodes leave)
    env = RecordEpisodes(gymnasium.make("CartPole-v1"), folder / "online", max_episodes=200, max_steps=20_000,
                         circular=True, overwrite=True)
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a tiny network: more threads only wait on each other
    q = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-3)
    play(env, q, 4, 1.0, rng, seed=1000)  # a few online episodes before the first batch

    # one-step transitions from both stores, with the same fields: uniform offline, prioritized online
    view = dict(n_steps=1, gamma=GAMMA, current_fields=("observation", "action"), next_fields=("observation",),
                sequence_fields=("reward",), meta_fields=())
    mixed = MixedSampler({offline.sampler("uniform", seed=1, **view): 0.5,
                          env.buffer.sampler("prioritized", seed=2, persist=False, **view): 0.5},
                         names=["offline", "online"])
    for step in range(300):
        if step % 50 == 0:
            play(env, q, 2, max(0.05, 1.0 - step / 200), rng, seed=2000 + step)  # recorded as they are played
        batch = mixed.batch(64)
        with torch.no_grad():
            target = batch["n_step_return"] + batch["bootstrap_discount"] * q(batch["next_observation"]).max(1).values
        value = q(batch["observation"]).gather(1, batch["action"].long()[:, None]).squeeze(1)
        td = target.float() - value
        loss = (batch["_weight"] * td.pow(2)).mean()  # weight 1 for the uniform rows
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mixed.update_priorities(batch, td.detach().abs() + 1e-3)  # the online rows' priorities; offline skipped
    online_episodes = len(env.buffer)
    env.close()

    # the dataset keeps the tuned policy's episodes: grow the imported store (sized to its data) first
    tuned = 5
    offline.grow(max_episodes=offline.max_episodes + tuned, max_steps=offline.max_steps + tuned * 501,
                 max_timesteps=500)
    with RecordEpisodes(gymnasium.make("CartPole-v1"), offline) as recorder:
        returns = play(recorder, q, tuned, 0.0, rng, seed=5000)
    print(f"episodes: {len(offline)} in the grown dataset ({report.episodes} imported + {tuned} tuned), "
          f"{online_episodes} online; loss {loss.item():.4f}; tuned returns {returns}")
    offline.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "offline_to_online")
