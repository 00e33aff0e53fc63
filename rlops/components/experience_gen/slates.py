"""Slate logs: the rows of one page (one per shown item) -> one slate record, or why not.

Rows arrive validated one by one (validation: propensities in (0, 1], a position inside the slate,
an item inside the action spec); here the page is checked as a whole (no position twice or missing,
no item twice, a cascade propensity that never increases down the page) and laid out as
rlops.components.common.slates describes. Positions are 0-based from here on.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from rlops.components.common import records
from rlops.components.common.slates import POSITION, PROPENSITY_CASCADE, SLATE, SLATE_ID, SLATE_ITEM, SLATE_LENGTH
from rlops.components.experience_gen.config import ExperienceGenConfig

SLATE_TOO_LONG = "slate_too_long"
SLATE_DUPLICATE_POSITION = "slate_duplicate_position"
SLATE_MISSING_POSITION = "slate_missing_position"
SLATE_DUPLICATE_ITEM = "slate_duplicate_item"
SLATE_CASCADE_INCREASES = "slate_cascade_increases"
SLATE_CASCADE_MISMATCH = "slate_cascade_mismatch"
SLATE_HAS_BAD_ROW = "slate_has_bad_row"
UNKNOWN_ITEM = "unknown_item"
SLATE_LISTS_DIFFER = "slate_lists_differ"
COUNT_PREFIX = "_count:"  # validation's per-row list lengths of a slate's slot fields (not written)
PADDING_ITEM = -1
# float32 logs: a cascade propensity may exceed the one above it by rounding, not by more
CASCADE_TOLERANCE = 1e-5


def resolve_first_position(config: ExperienceGenConfig, positions: np.ndarray | None) -> ExperienceGenConfig:
    """The config with slate_columns.first_position set: as configured, else read from a sample of
    the position column where the sample decides it (a 0: 0-based; a position equal to the slate
    length: 1-based); otherwise one error asking the user to say which."""
    import dataclasses

    c = config.slate_columns
    if c.first_position is not None:
        return config
    length = int(config.slate_length or 0)
    where = "experience_gen.slate_columns.first_position"
    if positions is None or not len(positions):
        raise ValueError(f"{where}: no sample of column {c.position!r} to tell 0- from 1-based positions; set 0 or 1")
    seen = set(np.unique(positions).tolist())
    if 0 in seen and length in seen:
        raise ValueError(
            f"{where}: column {c.position!r} holds both 0 and {length} (slate_length {length}); "
            f"set 0 or 1, or check slate_length"
        )
    if 0 in seen:
        first = 0
    elif length in seen:
        first = 1
    else:
        raise ValueError(
            f"{where}: the sample of column {c.position!r} ({sorted(seen)[:5]}) could be 0- or 1-based; set 0 or 1"
        )
    return dataclasses.replace(config, slate_columns=dataclasses.replace(c, first_position=first))


SLATE_IDS, SLATE_IDS_GROUPING = "slate_ids", "slate_ids_grouping"  # counters: pages seen, and those of > 1 row
MIN_PAGES_TO_JUDGE_GROUPING = 10  # fewer pages than this cannot tell a bad id column from short pages


def grouping_error(config: ExperienceGenConfig, slate_ids: int, grouping: int, missing_first: int) -> str | None:
    """One line when the slate id column does not group rows into pages: every id held one row,
    yet rows sat past the first position (their pages' first rows went under other ids). None
    otherwise: pages of one item at the first position are valid short pages."""
    length = int(config.slate_length or 0)
    if length < 2 or slate_ids < MIN_PAGES_TO_JUDGE_GROUPING or grouping or not missing_first:
        return None
    column = config.slate_columns.slate_id
    return (
        f"experience_gen.slate_columns.slate_id: column {column!r} does not group rows into pages: each of "
        f"its {slate_ids} ids held one row, and {missing_first} of them sit past the first position "
        f"(slate_length {length}); map the column a page's rows share (a request or impression id)"
    )


def num_items(config: ExperienceGenConfig) -> int:
    """K, from the action spec (set by the config or, with an item table, at planning)."""
    spec = config.action_spec
    assert spec is not None and spec.maximum is not None  # validated: slates need K
    return int(spec.maximum) - int(spec.minimum or 0) + 1


def resolve_items(config: ExperienceGenConfig) -> tuple[ExperienceGenConfig, tuple[str, ...]]:
    """With an item table: its ids in table order (an item's index is its row) and the config's
    action spec set to its K items (a configured spec must agree)."""
    import dataclasses

    from rlops.components.experience_gen import items
    from rlops.components.experience_gen.config import SpecConfig
    from rlops.components.experience_gen.errors import closest

    src = config.item_source
    if src is None:
        return config, ()
    frames = items.read_frames(src)
    id_column = config.slate_columns.item_table_id or config.slate_columns.item_id
    ids: list[str] = []
    for frame in frames:
        if id_column not in frame.columns:
            columns = [str(c) for c in frame.columns]
            raise ValueError(f"item_source ({src.pattern}): no id column {id_column!r}; {closest(id_column, columns)}")
        ids.extend(frame[id_column].astype(str).tolist())
    uniq, counts = np.unique(np.asarray(ids, object), return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"item_source ({src.pattern}): item id {uniq[np.argmax(counts > 1)]!r} appears twice")
    spec = config.action_spec
    if spec is not None and spec.maximum is not None and int(spec.maximum) - int(spec.minimum or 0) + 1 != len(ids):
        raise ValueError(
            f"experience_gen.action_spec: {int(spec.maximum) - int(spec.minimum or 0) + 1} items, but the item "
            f"table {src.pattern} lists {len(ids)}"
        )
    return dataclasses.replace(config, action_spec=SpecConfig.discrete(len(ids))), tuple(ids)


def map_items(
    columns: dict[str, np.ndarray], index: Mapping[str, int], column: str
) -> tuple[np.ndarray, dict[int, tuple[str, str]]]:
    """Item ids -> their rows in the item table; rows whose id the table lacks are rejected."""
    ids = np.asarray(columns[SLATE_ITEM]).astype(str)
    mapped = np.array([index.get(v, -1) for v in ids.tolist()], np.int64)
    rejects = {
        int(i): (UNKNOWN_ITEM, f"{column}: item id {ids[i]!r} is not in the item table")
        for i in np.flatnonzero(mapped < 0)
    }
    return mapped, rejects


def shows_an_item_twice(items: np.ndarray, shown: np.ndarray) -> np.ndarray:
    """[N] True where a slate's shown items ([N, L] indices) repeat one."""
    padding = -1 - np.arange(items.shape[1])[None, :]  # distinct, below every index
    ordered = np.sort(np.where(shown, items, padding), 1)
    return np.asarray((ordered[:, 1:] == ordered[:, :-1]).any(1))


def map_item_lists(
    columns: dict[str, np.ndarray], index: Mapping[str, int], column: str
) -> tuple[np.ndarray, dict[int, tuple[str, str]]]:
    """Slates' item id lists ([N, L], "" past a page's end) -> indices (PADDING_ITEM past it); a
    row with an id the table lacks, or an item twice, is rejected."""
    ids = np.asarray(columns[SLATE_ITEM], object)
    shown = ids != ""
    mapped = np.full(ids.shape, PADDING_ITEM, np.int64)
    mapped[shown] = [index.get(str(v), -2) for v in ids[shown].tolist()]
    rejects: dict[int, tuple[str, str]] = {}
    for i in np.flatnonzero((mapped == -2).any(1)):
        unknown = ids[i][mapped[i] == -2][0]
        rejects[int(i)] = (UNKNOWN_ITEM, f"{column}: item id {unknown!r} is not in the item table")
    for i in np.flatnonzero(shows_an_item_twice(mapped, shown)):
        rejects.setdefault(
            int(i), (SLATE_DUPLICATE_ITEM, f"{column}: an item is shown twice in {ids[i][shown[i]].tolist()}")
        )
    return mapped, rejects


def assemble_slate_rows(
    columns: Mapping[str, np.ndarray],
    features: Sequence[str],
    num_items: int,
    split_units: np.ndarray,
) -> dict[str, np.ndarray]:
    """Validated slates given one per row (slot fields [N, L], NaN / PADDING_ITEM past a page's end)
    -> the columns of their records."""
    items = np.asarray(columns[SLATE_ITEM], np.int64)
    shown = items != PADDING_ITEM
    n = len(items)
    out: dict[str, np.ndarray] = {name: columns[name] for name in features if name in columns}
    out[SLATE_ID] = _id_text(columns[SLATE_ID])
    out[SLATE] = items
    out[SLATE_LENGTH] = shown.sum(1).astype(np.int64)
    out[records.REWARD] = np.where(shown, columns[records.REWARD], 0.0)
    out[records.PROPENSITY] = np.where(shown, columns[records.PROPENSITY], 1.0)
    if PROPENSITY_CASCADE in columns:
        cascade = np.asarray(columns[PROPENSITY_CASCADE], np.float64)
        last = cascade[np.arange(n), out[SLATE_LENGTH] - 1]
        out[PROPENSITY_CASCADE] = np.where(shown, cascade, last[:, None])
    out[records.NUM_ACTIONS] = np.full(n, num_items, np.int64)
    if records.TIMESTAMP in columns:
        out[records.TIMESTAMP] = columns[records.TIMESTAMP]
    out[records.SPLIT_UNIT] = np.asarray(split_units, np.uint64).view(np.int64)
    return out


def slate_problem(
    slate_id: str, cols: Mapping[str, np.ndarray], slate_length: int, first_position: int = 0
) -> tuple[str, str] | None:
    """Why one page's rows (sorted by 0-based position) cannot be written as a slate, or None.
    Messages count positions as the logs do (from `first_position`)."""
    pos = cols[POSITION]
    n = len(pos)
    if n > slate_length:
        return SLATE_TOO_LONG, f"slate {slate_id!r}: {n} rows, more than slate_length {slate_length}"
    uniq, counts = np.unique(pos, return_counts=True)
    if len(uniq) < n:
        dup = int(uniq[np.argmax(counts > 1)])
        return SLATE_DUPLICATE_POSITION, (
            f"slate {slate_id!r}: position {dup + first_position} appears {counts.max()} times"
        )
    if pos[-1] != n - 1:
        missing = (np.setdiff1d(np.arange(int(pos[-1]) + 1), pos)[:5] + first_position).tolist()
        return SLATE_MISSING_POSITION, f"slate {slate_id!r}: position(s) {missing} missing"
    items = cols[SLATE_ITEM]
    uniq, counts = np.unique(items, return_counts=True)
    if len(uniq) < n:
        dup = int(uniq[np.argmax(counts > 1)])
        return SLATE_DUPLICATE_ITEM, f"slate {slate_id!r}: item {dup} is shown {counts.max()} times"
    cascade = cols.get(PROPENSITY_CASCADE)
    if cascade is not None:
        rise = np.flatnonzero(np.diff(cascade) > CASCADE_TOLERANCE * np.maximum(cascade[:-1], 1e-30))
        if len(rise):
            j = int(rise[0])
            return SLATE_CASCADE_INCREASES, (
                f"slate {slate_id!r}: propensity_cascade rises from {cascade[j]:.6g} at position "
                f"{j + first_position} to {cascade[j + 1]:.6g} at {j + 1 + first_position} (a prefix is never "
                f"likelier than a shorter one)"
            )
        first, marginal = float(cascade[0]), float(cols[records.PROPENSITY][0])
        if abs(first - marginal) > CASCADE_TOLERANCE * max(first, marginal):
            return SLATE_CASCADE_MISMATCH, (
                f"slate {slate_id!r}: propensity_cascade {first:.6g} at the first position differs from "
                f"its propensity {marginal:.6g} (the first slot's prefix is the slot itself)"
            )
    return None


def page_problems(
    ids: np.ndarray,
    group: np.ndarray,
    cols: Mapping[str, np.ndarray],
    slate_length: int,
    first_position: int,
    bad_rows: np.ndarray,
) -> dict[int, tuple[str, str]]:
    """Pages that cannot be written, {page: (reason, message)}, for rows sorted by (page, position):
    found for all pages at once, explained one page at a time (only the bad ones)."""
    num_pages = len(ids)
    counts = np.bincount(group, minlength=num_pages)
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(group)) - starts[group]
    same = group[1:] == group[:-1]
    flagged = (counts > slate_length) | (bad_rows > 0)
    pos = cols[POSITION]
    flagged[group[pos != rank]] = True  # a position twice or missing: positions are not 0..n-1
    by_item = np.lexsort((cols[SLATE_ITEM], group))
    twice = same & (cols[SLATE_ITEM][by_item][1:] == cols[SLATE_ITEM][by_item][:-1])
    flagged[group[by_item][1:][twice]] = True
    cascade = cols.get(PROPENSITY_CASCADE)
    if cascade is not None:
        rises = same & (np.diff(cascade) > CASCADE_TOLERANCE * np.maximum(cascade[:-1], 1e-30))
        flagged[group[1:][rises]] = True
        p = cols[records.PROPENSITY]
        first = rank == 0
        mismatch = np.abs(cascade - p) > CASCADE_TOLERANCE * np.maximum(cascade, p)
        flagged[group[first & mismatch]] = True
    problems: dict[int, tuple[str, str]] = {}
    for g in np.flatnonzero(flagged).tolist():
        sid = str(ids[g])
        if bad_rows[g]:
            problems[g] = (SLATE_HAS_BAD_ROW, f"slate {sid!r}: {int(bad_rows[g])} of its rows were quarantined")
            continue
        rows = slice(int(starts[g]), int(starts[g] + counts[g]))
        problem = slate_problem(sid, {k: v[rows] for k, v in cols.items()}, slate_length, first_position)
        if problem is not None:
            problems[g] = problem
    return problems


def assemble_pages(
    ids: np.ndarray,
    group: np.ndarray,
    cols: Mapping[str, np.ndarray],
    features: Sequence[str],
    slate_length: int,
    num_items: int,
    split_units: np.ndarray,
) -> dict[str, np.ndarray]:
    """Valid pages' rows (sorted by page, then position; `group` [R] the page of each row, pages
    0..G-1 all valid) -> the columns of their G slate records."""
    num_pages = len(ids)
    counts = np.bincount(group, minlength=num_pages)
    starts = np.cumsum(counts) - counts
    slot = cols[POSITION]
    pad = slate_length

    def slots(values: np.ndarray, fill: float, dtype: type) -> np.ndarray:
        laid: np.ndarray = np.full((num_pages, pad), fill, dtype)
        laid[group, slot] = values
        return laid

    out: dict[str, np.ndarray] = {name: cols[name][starts] for name in features if name in cols}
    out[SLATE_ID] = _id_text(ids)
    out[SLATE] = slots(cols[SLATE_ITEM], PADDING_ITEM, np.int64)
    out[SLATE_LENGTH] = counts.astype(np.int64)
    out[records.REWARD] = slots(cols[records.REWARD], 0.0, np.float64)
    out[records.PROPENSITY] = slots(cols[records.PROPENSITY], 1.0, np.float64)
    if PROPENSITY_CASCADE in cols:
        cascade = slots(cols[PROPENSITY_CASCADE], np.nan, np.float64)
        last = cascade[np.arange(num_pages), counts - 1]
        out[PROPENSITY_CASCADE] = np.where(np.isnan(cascade), last[:, None], cascade)
    out[records.NUM_ACTIONS] = np.full(num_pages, num_items, np.int64)
    if records.TIMESTAMP in cols:
        out[records.TIMESTAMP] = cols[records.TIMESTAMP][starts]
    out[records.SPLIT_UNIT] = np.asarray(split_units, np.uint64).view(np.int64)
    return out


def _id_text(ids: np.ndarray) -> np.ndarray:
    """Slate ids as text objects (the record encoder writes text as its UTF-8 bytes, in one Arrow
    step: no per-slate encode here)."""
    out = np.empty(len(ids), object)
    out[:] = list(map(str, ids))
    return out
