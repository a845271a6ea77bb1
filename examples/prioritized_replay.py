"""Online prioritized replay: an actor writes episodes into a ring while a learner samples n-step
batches by priority, trains a tiny Q-network and sends back |TD error| as the new priorities; then the
folder is reopened and sampling carries on from the saved priorities and sampler state.

    python examples/prioritized_replay.py [folder]
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from memmap_replay import ReplayBuffer

OBS, ACTIONS = 4, 2


def play_episode(buffer: ReplayBuffer, rng: np.random.Generator) -> None:
    """A toy chain task: walk right to reach the end (reward 1, terminated) or time out (truncated)."""
    position, state = 0, rng.standard_normal(OBS).astype(np.float32)
    with buffer.one_episode() as meta:
        for _ in range(30):
            action = int(rng.integers(ACTIONS))
            position += 1 if action == 1 else -1
            reward = 1.0 if position >= 5 else 0.0
            buffer.store(state=state, action=action, reward=reward)
            state = (state + rng.standard_normal(OBS) * 0.1).astype(np.float32)
            if position >= 5:
                meta.set_end("terminated")
                return
        meta.set_end("truncated", final=dict(state=state))


def main(folder: Path) -> None:
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(folder, max_episodes=40, max_timesteps=30, circular=True, overwrite=True,
                          fields=dict(state=("float", OBS), action="int", reward="float"))
    for _ in range(10):
        play_episode(buffer, rng)
    sampler = buffer.sampler("prioritized", alpha=0.6, beta=0.4, beta_steps=300, seed=0, n_steps=3, gamma=0.99,
                             current_fields=("state", "action"), next_fields=("state",), sequence_fields=("reward",))
    q = torch.nn.Linear(OBS, ACTIONS)
    optimizer = torch.optim.SGD(q.parameters(), lr=0.05)
    for step in range(300):
        if step % 10 == 0:
            play_episode(buffer, rng)  # the ring evicts the oldest episodes; the sampler follows
        batch = sampler.batch(32)
        with torch.no_grad():
            bootstrap = q(batch["next_state"]).max(dim=1).values
        target = batch["n_step_return"] + batch["bootstrap_discount"] * bootstrap
        value = q(batch["state"]).gather(1, batch["action"].long()[:, None]).squeeze(1)
        td = target - value
        loss = (batch["_weight"] * td.pow(2)).mean()  # importance weights correct the prioritized draws
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        sampler.update_priorities(batch["_key"], td.detach().abs() + 1e-3)
    state = json.dumps(sampler.state_dict())
    print(f"episodes: {buffer.num_episodes} live, {sampler.draws} batches drawn, loss {loss.item():.4f}, "
          f"{sampler.dropped} stale priority updates dropped, largest priority {sampler.max_priority:.3f}")
    sampler.close()
    buffer.close()

    reopened = ReplayBuffer.from_folder(folder)
    resumed = reopened.sampler("prioritized", alpha=0.6, beta=0.4, beta_steps=300, n_steps=3, gamma=0.99,
                               current_fields=("state", "action"), next_fields=("state",), sequence_fields=("reward",))
    resumed.load_state_dict(json.loads(state))
    weights = resumed.batch(32)["_weight"]
    print(f"reopened: priorities kept in {folder / 'priorities'}, beta {resumed.beta:.2f}, "
          f"weights {weights.min().item():.3f}..{weights.max().item():.3f}")
    resumed.close()
    reopened.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "prioritized")
