"""Actors and a learner on Ray: two env actors write episodes into a shard actor while a learner samples
prioritized n-step batches from it, trains a tiny Q-network and sends back |TD error| as priorities. Half-way
the shard actor's process is killed: Ray restarts it from its folder (every committed episode, every
priority), the calls in flight are sent again, and everyone carries on.

The env is CartPole when gymnasium is installed (the [io] extra), else a random walk with the same shapes.

    python examples/ray_actor_learner.py [folder]
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray
import torch

from memmap_replay.distributed import RayShardedSampler, call_shard, create_shard

OBS, ACTIONS, MAX_T = 4, 2, 500
FIELDS = dict(obs=("float", OBS), action="int", reward="float")
VIEW = dict(n_steps=3, gamma=0.99, current_fields=("obs", "action"), next_fields=("obs",), sequence_fields=("reward",))


@ray.remote(num_cpus=0)
class EnvActor:
    """Plays episodes with a random policy and commits each whole episode to the shard."""

    def __init__(self, shard, seed: int):
        self.shard, self.rng, self.seed = shard, np.random.default_rng(seed), seed
        try:
            import gymnasium
            self.env = gymnasium.make("CartPole-v1")
        except ImportError:
            self.env = None

    def episode(self, number: int) -> dict:
        if self.env is None:  # a random walk: ends when it leaves [-1, 1]
            obs = np.cumsum(self.rng.normal(0, 0.1, (MAX_T + 1, OBS)), axis=0).astype(np.float32)
            out = np.abs(obs[1:]).max(axis=1) > 1
            length = int(np.argmax(out)) + 1 if out.any() else MAX_T
            actions = self.rng.integers(0, ACTIONS, length)
            end = "terminated" if out.any() else "truncated"
            return dict(episode=dict(obs=obs[:length], action=actions, reward=np.ones(length)), end=end,
                        final=None if out.any() else dict(obs=obs[length]))
        obs, _ = self.env.reset(seed=self.seed * 100_000 + number)
        steps, ended = [], None
        while ended is None:
            action = int(self.rng.integers(ACTIONS))
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            steps.append((obs, action, reward))
            obs = next_obs
            ended = "terminated" if terminated else "truncated" if truncated else None
        columns = [np.array(column) for column in zip(*steps)]
        return dict(episode=dict(obs=columns[0], action=columns[1], reward=columns[2]), end=ended,
                    final=None if ended == "terminated" else dict(obs=obs))

    def run(self, episodes: int, pause: float) -> int:
        for number in range(episodes):
            # sent through the object store; sent again if the shard dies meanwhile (at least once)
            call_shard(self.shard, "add_episode", **self.episode(number))
            time.sleep(pause)
        return episodes


def main(folder: Path) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    shard = create_shard(folder / "shard-0", 300, MAX_T, FIELDS, circular=True, view=VIEW, alpha=0.6)
    actors = [EnvActor.remote(shard, seed) for seed in (1, 2)]
    playing = [actor.run.remote(60, 0.02) for actor in actors]
    while call_shard(shard, "info")["episodes"] < 4:  # the first episodes are in
        time.sleep(0.05)
    sampler = RayShardedSampler([shard], "prioritized", seed=0, beta=0.4, beta_steps=400, draw_ahead=2)
    q = torch.nn.Linear(OBS, ACTIONS)
    optimizer = torch.optim.SGD(q.parameters(), lr=0.01)
    first = call_shard(shard, "info")
    for step in range(400):
        if step == 200:  # the shard's process dies; Ray restarts it from its folder
            ray.kill(shard, no_restart=False)
        batch = sampler.batch(64)
        with torch.no_grad():
            bootstrap = q(batch["next_obs"]).max(dim=1).values
        target = batch["n_step_return"] + batch["bootstrap_discount"] * bootstrap
        value = q(batch["obs"]).gather(1, batch["action"].long()[:, None]).squeeze(1)
        td = target - value
        loss = (batch["_weight"] * td.pow(2)).mean()  # importance weights correct the prioritized draws
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        sampler.update_priorities(batch["_key"], td.detach().abs() + 1e-3)  # sent without waiting
    written = sum(ray.get(playing))
    sampler.wait()
    durable = call_shard(shard, "checkpoint")
    info = call_shard(shard, "info")
    prioritized = info["samplers"]["prioritized"]
    print(f"episodes: {info['episodes']} committed ({written} played; at least once across the restart), "
          f"{info['steps']} steps, {sampler.draws} batches drawn, loss {loss.item():.4f}")
    print(f"shard restarted: process {first['pid']} -> {info['pid']}; priorities {prioritized['min_priority']:.3g}.."
          f"{prioritized['max_priority']:.3g} kept in {durable['priorities'][0]}")
    sampler.close()
    ray.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "ray_actor_learner")
