"""The core room: the on-disk format, field schemas, the store (files, episode table, commits, ring
eviction, the writer lock), episode writers and the index arithmetic over the episode table. Numpy only:
nothing here imports torch, a sampler, a view or a sharing feature (those subscribe to commits through
``observe_commits``)."""

from .episodes import Episode, EpisodeList
from .format import FORMAT_VERSION, Capacity, StoreMeta
from .index import EpisodeTable, Positions
from .lock import WriterLock
from .schema import FieldSpec, Schema
from .store import CommitObserver, EpisodeStore, PendingEpisode, observe_commits
from .vector import VectorEpisodeWriter
from .writer import EpisodeWriter

__all__ = ["Episode", "EpisodeList", "FORMAT_VERSION", "Capacity", "StoreMeta", "EpisodeTable", "Positions",
           "WriterLock", "FieldSpec", "Schema", "CommitObserver", "EpisodeStore", "PendingEpisode", "observe_commits",
           "EpisodeWriter", "VectorEpisodeWriter"]
