"""The sharing room: what makes a store a dataset to hand to someone else: the dataset card, the checksum
manifest, pack/unpack archives, verify, running field statistics, and frames and videos of image fields.
The manifest and the statistics follow a writer's commits as commit observers (``core.store``). The browser
viewer and the static report (``sharing.viewer``: ``memmap_replay.view``) are imported on first use."""

from .card import DatasetCard, add_provenance, read_card, update_card, write_card
from .checksums import check_manifest, write_manifest
from .frames import FramesWritten, contact_sheet, write_video
from .pack import pack, unpack
from .stats import FieldStats, StoreStats
from .verify import VerifyReport, verify

__all__ = ["DatasetCard", "add_provenance", "read_card", "update_card", "write_card", "check_manifest",
           "write_manifest", "FramesWritten", "contact_sheet", "write_video", "pack", "unpack", "FieldStats",
           "StoreStats", "VerifyReport", "verify"]
