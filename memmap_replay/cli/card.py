"""``card FOLDER``: print or edit a store's dataset card (see ``memmap_replay.card``)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

from ..sharing.card import MAX_DEPTH, TEXT_KEYS, DatasetCard, read_card, write_card
from ..sharing.checksums import store_folder
from ..errors import InvalidDataError, OptionError
from . import EXIT_OK
from .checksum import _SHARE_EXIT_CODES, _guarded

_KEYS = [key.name for key in fields(DatasetCard) if key.name != "unknown"]

_CARD_HELP = f"""\
Print a store's dataset card (card.json, shown as the Markdown of README.md), or edit it. Editing
writes card.json and README.md atomically, and updates checksums.sha256 if the folder has one; it does
not need the writer lock. README.md is a Hugging Face dataset card: YAML front matter (license, tags,
task_categories: reinforcement-learning, pretty_name, size_categories), the card, the fields, the
episodes' counts, lengths and returns (as of this write) and how to load the folder.

--set KEY=VALUE sets one key (KEY= clears it). Keys: {', '.join(_KEYS)}.
Text keys ({', '.join(TEXT_KEYS)}) take VALUE as it is; the others take JSON (a number, a list, an
object, null). extra.NAME=VALUE sets a key of your own in 'extra' (JSON if it parses, else text).
The name looks like 'namespace/name-vN', e.g. mujoco/hopper-expert-v0. --from-json FILE merges a JSON
object (- reads standard input); --set is applied after it.

{_SHARE_EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data --set name=cartpole/dqn-replay-v0 "description=DQN replay, 1M steps" license=CC-BY-4.0
  %(prog)s replay_data --set ref_min_score=9.4 ref_max_score=500 extra.seed_range=[0,100]
  %(prog)s replay_data --from-json my_card.json --json"""


def add(commands) -> None:
    parser = commands.add_parser("card", help="print or edit a store's dataset card", description=_CARD_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", dest="assignments",
                        help="set card keys (KEY= clears one); see above")
    parser.add_argument("--from-json", metavar="FILE", help="merge the keys of a JSON object file (- for stdin)")
    parser.add_argument("--json", action="store_true", help="print card.json instead of the Markdown")
    parser.set_defaults(run=run_card)


def run_card(args: argparse.Namespace) -> int:
    return _guarded(args, lambda: _card_action(args))


def _card_action(args: argparse.Namespace) -> int:
    folder = store_folder(args.folder)
    card = read_card(folder)
    if args.from_json or args.assignments:
        data = card.to_json() if card is not None else {}
        data.update(_load_json(args.from_json) if args.from_json else {})
        for assignment in args.assignments:
            _assign(data, assignment)
        card = DatasetCard.from_json(data)
        write_card(folder, card)
    if card is None:
        print("null" if args.json else f"{folder} has no dataset card yet; write one with: memmap-replay card {folder} "
                                       f"--set name=NAMESPACE/NAME-v0 description=...", file=sys.stdout)
        return EXIT_OK
    print(json.dumps(card.to_json(), indent=2, ensure_ascii=False) if args.json
          else card.render(front_matter=False).rstrip())
    return EXIT_OK


def _load_json(name: str) -> dict:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidDataError(f"--from-json {name} cannot be read ({error})") from None
    except (ValueError, RecursionError) as error:
        raise InvalidDataError(f"--from-json {name} is not valid JSON ({str(error)[:200]})") from None
    if not isinstance(data, dict):
        raise InvalidDataError(f"--from-json {name} must hold a JSON object of card keys (got a {type(data).__name__})")
    return data


def _assign(data: dict, assignment: str) -> None:
    key, equals, text = assignment.partition("=")
    if not equals:
        raise OptionError(f"--set takes KEY=VALUE (got {assignment!r}); e.g. --set license=MIT")
    if key.startswith("extra.") and len(key) > 6:
        data["extra"] = {**(data.get("extra") or {}), key[6:]: _parse(text, strict=False, key=key)}
    elif key not in _KEYS:
        raise OptionError(f"--set {key}: unknown card key (known: {', '.join(_KEYS)}); use extra.{key}=VALUE for "
                               f"a key of your own")
    elif text == "":
        data.pop(key, None)
    else:
        data[key] = text if key in TEXT_KEYS else _parse(text, strict=True, key=key)


def _parse(text: str, *, strict: bool, key: str):
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidDataError(f"--set {key}: the value is JSON nested too deep to read (got {text!r:.40}...); a "
                               f"card holds values nested at most {MAX_DEPTH} levels") from None
    except ValueError:
        if strict:
            raise InvalidDataError(f"--set {key}: the value must be JSON (a number, a list, an object or null; got "
                                   f"{text!r:.80})") from None
        return text
