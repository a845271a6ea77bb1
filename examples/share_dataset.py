"""Share a dataset, end to end: record -> card -> pack -> unpack -> verify -> train (the README's walkthrough).

Run: python examples/share_dataset.py [WORKDIR]   (needs the [io] extra: gymnasium)
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium
import torch

from memmap_replay import ReplayBuffer, read_card
from memmap_replay.recording import RecordEpisodes


def cli(*args: str) -> str:
    """The command line, as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "memmap_replay", *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"memmap-replay {' '.join(map(str, args))} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def main(work: Path) -> None:
    data, archive, unpacked = work / "cartpole_data", work / "cartpole.tar.gz", work / "datasets" / "cartpole"

    # 1. record 20 seeded episodes of a random policy
    with RecordEpisodes(gymnasium.make("CartPole-v1"), data) as env:
        env.action_space.seed(0)
        for seed in range(20):
            env.reset(seed=seed)
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                done = terminated or truncated

    # 2. describe it, look at it
    cli("card", data, "--set", "name=cartpole/random-v0", "description=Random policy, 20 episodes",
        "license=CC-BY-4.0")
    print(cli("info", data).strip().splitlines()[0])
    # README.md (the card rendered, with the Hugging Face Hub's front matter) and a LeRobot-style stats.json
    # beside the folder, for a Hub upload
    assert (data / "README.md").read_text().startswith("---\nlicense: cc-by-4.0\n")
    print(cli("stats", data, "--stats-json", work / "stats.json", "--quiet").strip().splitlines()[-1])
    # 3. pack; 4. unpack elsewhere and verify
    cli("pack", data, archive)
    cli("unpack", archive, unpacked)
    print(cli("verify", unpacked).strip().splitlines()[-1])

    # 5. train from it: normalize observations with the stored statistics
    with ReplayBuffer.from_folder(unpacked, read_only=True) as buffer:
        stats = buffer.stats()
        mean = torch.as_tensor(stats.fields["observation"].mean, dtype=torch.float32)
        std = torch.as_tensor(stats.fields["observation"].std, dtype=torch.float32) + 1e-6
        model = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        loader = buffer.dataloader(batch_size=64, timestep_level=True, shuffle=True, seed=0)
        for batch in loader:  # one epoch of behaviour cloning
            logits = model((batch["observation"] - mean) / std)
            loss = torch.nn.functional.cross_entropy(logits, batch["action"].long())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"card: {read_card(unpacked).name}; episodes: {buffer.num_episodes}, steps: {stats.episodes['steps']}, "
              f"mean return {stats.episodes['return']['mean']:.1f}, last loss {loss.item():.3f}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as work:
            main(Path(work))
