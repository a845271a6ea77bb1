"""Record gymnasium episodes (one env, then four vectorized ones) with a random policy, reopen, summarize.

    python examples/record_gymnasium.py [folder]       (needs gymnasium: pip install -e '.[io]')
"""

import sys
import tempfile
from pathlib import Path

import gymnasium
import numpy as np

from memmap_replay import ReplayBuffer
from memmap_replay.sharing.card import read_card
from memmap_replay.core.format import END_NAMES
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

    # reopen, from this or any other process
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    table = buffer.episode_store.live_table()
    data = buffer.get_all_data(fields=("reward",), meta_fields=("seed", "episode_lens"))
    ends = [END_NAMES[int(code)] or "cut" for code in table.end]  # cut: by a reset or close, end unspecified
    print(buffer)
    print(f"episodes: {buffer.num_episodes}, steps: {buffer.num_steps}, "
          f"ends: { {end: ends.count(end) for end in sorted(set(ends))} }")
    print(f"mean return: {float(data['reward'].sum(1).mean()):.1f}, seeds: {data['seed'].tolist()}")
    card = read_card(folder)
    print(f"card: env {card.env_spec['id']}, {len(card.provenance)} recordings, reset seeds {card.seeds['reset']}")
    buffer.close()
    # the fields are named as memmap_replay.interop names them (observation, action, reward), so the store
    # exports as it is: memmap_replay.interop.export_minari(folder, "cartpole/random-v0") (needs minari)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "record_gymnasium")
