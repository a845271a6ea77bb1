"""Record gymnasium episodes (one env, then four vectorized ones) with a random policy, reopen, summarize.

    python examples/record_gymnasium.py [folder]       (needs gymnasium: pip install -e '.[io]')
"""

import sys
import tempfile
from pathlib import Path

import gymnasium
import numpy as np

from memmap_replay import ReplayBuffer, read_card
from memmap_replay.recording import RecordEpisodes, RecordVectorEpisodes


def main(folder: Path) -> None:
    # one env: each episode commits when it ends (terminated or truncated), with its final observation
    with RecordEpisodes(gymnasium.make("CartPole-v1"), folder, overwrite=True) as env:
        env.action_space.seed(0)
        for seed in range(5):
            obs, info = env.reset(seed=seed)
            done = False
            while not done:
                obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
                done = terminated or truncated

    # four envs stepping together (autoreset NEXT_STEP); appended to the same store
    envs = RecordVectorEpisodes(gymnasium.make_vec("CartPole-v1", 4, vectorization_mode="sync"), folder)
    envs.reset(seed=100)
    rng = np.random.default_rng(0)
    for _ in range(200):
        envs.step(rng.integers(0, 2, size=4))
    envs.close()  # the episodes still running are committed as cut (end unspecified)

    # reopen, from this or any other process, and read the episodes back with how each one ended
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    ends = [end or "cut" for end in buffer.ends.tolist()]  # '' (cut by a reset or close): end not recorded
    returns = [float(episode["reward"].sum()) for episode in buffer.iterate_episodes(fields="reward")]
    print(buffer)
    print(f"episodes: {buffer.num_episodes}, steps: {buffer.num_steps}, "
          f"ends: { {end: ends.count(end) for end in sorted(set(ends))} }")
    seeds = [int(episode.meta["seed"]) for episode in buffer.iterate_episodes(fields=(), meta_fields="seed")]
    print(f"mean return: {np.mean(returns):.1f}, seeds: {seeds}")
    first = buffer.episode(0)  # the oldest; -1 is the newest
    observations = first.observations("observation")  # (T + 1, 4): Minari's shape, the final observation last
    print(f"episode {first.id}: {len(first)} steps, end {first.end!r}, observations {observations.shape}, "
          f"terminations {int(first.terminations.sum())}, truncations {int(first.truncations.sum())}")
    card = read_card(folder)
    print(f"card: env {card.env_spec['id']}, {len(card.provenance)} recordings, reset seeds {card.seeds['reset']}")
    buffer.close()
    # the fields are named as memmap_replay.interop names them (observation, action, reward), so the store
    # exports as it is: memmap_replay.interop.export_minari(folder, "cartpole/random-v0") (needs minari)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "record_gymnasium")
