"""An interval index over time that answers "which offset ranges are taken during these sections?".

Placed buffers are rectangles: an offset range times a section range. A segment tree over the
sections keeps, per node, two unions of offset ranges, each a flat sorted list of boundaries
``[lo0, hi0, lo1, hi1, ...]`` of disjoint, non-touching ranges:

- ``own[v]``: rectangles whose section range covers all of node ``v``;
- ``part[v]``: rectangles that cover some node in ``v``'s subtree (so they meet ``v``'s range).

A query for sections ``[start, end)`` needs ``part`` of the O(log n) nodes that tile the window and
``own`` of the nodes on the two root paths at its ends; every rectangle meeting the window is in one
of them. Unions stay short because placed buffers pack tightly, so a query costs far less than
visiting every buffer that overlaps in time.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import sub


def add_range(bounds: list[int], lo: int, hi: int) -> None:
    """Merge ``[lo, hi)`` into a flat sorted list of disjoint ranges, joining touching ones.

    >>> b = [0, 4, 10, 12]
    >>> add_range(b, 4, 6); b
    [0, 6, 10, 12]
    >>> add_range(b, 7, 10); b
    [0, 6, 7, 12]
    """
    _splice(bounds, lo, hi, bisect_left(bounds, lo), bisect_right(bounds, hi))


def _splice(bounds: list[int], lo: int, hi: int, i: int, j: int) -> None:
    """Replace boundaries ``bounds[i:j]`` (those within ``[lo, hi]``) by the merged range's ends;
    an end that falls inside an existing range (an odd position) is not a boundary."""
    if i & 1:
        if j & 1:
            del bounds[i:j]
        else:
            bounds[i:j] = (hi,)
    elif j & 1:
        bounds[i:j] = (lo,)
    else:
        bounds[i:j] = (lo, hi)


class OccupancyIndex:
    """Taken offset ranges of placed rectangles, queried by a window of sections."""

    def __init__(self, sections: int, longest: int | None = None) -> None:
        """An empty index over ``sections``; ``place`` windows span at most ``longest`` sections."""
        leaves = 1
        while leaves < sections:
            leaves *= 2
        self._leaves = leaves
        # a tile of a window of at most `longest` leaves sits no higher: `place` keeps no `part`
        # above that level (nodes numbered below `_floor`), as no query ever reads it there
        self._floor = leaves >> (max(1, min(longest or leaves, leaves)).bit_length() - 1)
        # per tree node, made on first use: most nodes of a big tree stay empty
        self._own: list[list[int] | None] = [None] * (2 * leaves)
        self._part: list[list[int] | None] = [None] * (2 * leaves)

    def _tiles(self, start: int, end: int) -> list[int]:
        """The tree nodes whose ranges tile sections ``[start, end)`` exactly."""
        tiles = []
        lo, hi = start + self._leaves, end + self._leaves
        while lo < hi:
            if lo & 1:
                tiles.append(lo)
                lo += 1
            if hi & 1:
                hi -= 1
                tiles.append(hi)
            lo >>= 1
            hi >>= 1
        return tiles

    def _edge_paths(self, start: int, end: int) -> list[int]:
        """Nodes on the root paths of the window's first and last section (no repeats)."""
        left, right = start + self._leaves, end - 1 + self._leaves
        nodes = []
        while left != right:
            nodes.append(left)
            nodes.append(right)
            left >>= 1
            right >>= 1
        while left:
            nodes.append(left)
            left >>= 1
        return nodes

    def add(self, lo: int, hi: int, start: int, end: int) -> None:
        """Record offsets ``[lo, hi)`` as taken during sections ``[start, end)``.

        Only the tiles and their ancestors need ``part`` (a node inside a tile is reached by a
        query through the tile's ``own``). ``part`` of a parent always covers ``part`` of its
        children, so each climb stops at the first node that already covers ``[lo, hi)``.
        """
        own, part = self._own, self._part
        for tile in self._tiles(start, end):
            _add_to(own, tile, lo, hi)
            node = tile
            while node and not _covers(part[node], lo, hi):
                _add_to(part, node, lo, hi)
                node >>= 1

    def place(self, start: int, end: int, size: int) -> int:
        """Best-fit ``size`` units during sections ``[start, end)``, record them, return the offset.

        The same as ``best_fit(self.taken(start, end), size)`` followed by ``add``, with the tile
        walk shared and the range merges inlined: this loop is the whole cost of a greedy pass.
        ``end - start`` must not exceed the ``longest`` the index was made with.
        """
        own, part, leaves = self._own, self._part, self._leaves
        tiles = self._tiles(start, end)
        lists = [part[tile] for tile in tiles if part[tile]]
        lists += _path_lists(own, start + leaves, end + leaves, self._floor)
        offset = best_fit(lists, size) if lists else 0
        _insert(own, part, tiles, offset, offset + size, self._floor)
        return offset

    def taken(self, start: int, end: int) -> list[list[int]]:
        """Flat range lists whose union is every offset taken somewhere in ``[start, end)``."""
        part, own = self._part, self._own
        lists = [part[node] for node in self._tiles(start, end)]
        lists += [own[node] for node in self._edge_paths(start, end)]
        return [bounds for bounds in lists if bounds]


def _covers(bounds: list[int] | None, lo: int, hi: int) -> bool:
    """True when one range of the flat list ``bounds`` contains ``[lo, hi)``.

    >>> _covers([0, 4, 6, 9], 6, 9), _covers([0, 4, 6, 9], 3, 7), _covers(None, 0, 1)
    (True, False, False)
    """
    if bounds is None:
        return False
    i = bisect_right(bounds, lo)
    return i % 2 == 1 and hi <= bounds[i]


def _add_to(unions: list[list[int] | None], node: int, lo: int, hi: int) -> None:
    """``add_range`` on ``unions[node]``, making the list if the node has none yet."""
    bounds = unions[node]
    if bounds is None:
        unions[node] = [lo, hi]
    else:
        add_range(bounds, lo, hi)


def best_fit(lists: list[list[int]], size: int) -> int:
    """Lowest offset of the smallest free gap that holds ``size``, else the top of the taken set.

    The union's gaps come from the range starts and ends sorted apart: after the k-th smallest end
    the next free byte run is ``[ends[k], starts[k + 1])`` whenever that is non-empty. All the
    work is in C-level sorts and scans.

    >>> best_fit([[0, 4, 9, 10], [5, 6, 12, 20]], 2)
    10
    >>> best_fit([[2, 4]], 2)
    0
    >>> best_fit([[0, 4]], 5)
    4
    """
    if len(lists) == 1:  # one flat list is sorted already
        flat = lists[0]
    else:
        flat = []
        for bounds in lists:
            flat += bounds
    starts = flat[0::2]
    ends = [0]  # the leading 0 end: the run below the lowest range
    ends += flat[1::2]
    if len(lists) > 1:
        starts.sort()
        ends.sort()
    starts.append(0)  # pairs with the highest end: never a gap, the space above is open
    runs = list(map(sub, starts, ends))
    fitting = min(filter(size.__le__, runs), default=None)
    return ends[-1] if fitting is None else ends[runs.index(fitting)]


def _path_lists(
    own: list[list[int] | None], first: int, stop: int, floor: int
) -> list[list[int]]:
    """Non-empty ``own`` lists of the nodes that stick out of the leaf window ``[first, stop)``.

    Those are the strict ancestors of the window's tiles: the ancestors of leaf ``first`` above
    its lowest set bit (they also hold leaves before it) and those of leaf ``stop - 1`` above the
    lowest set bit of ``stop`` (they also hold ``stop``). A node inside the window needs no look:
    its ``own`` ranges are in the ``part`` of the tile it lies under. Nodes numbered below
    ``floor`` sit above every tile, so their ``own`` is empty.
    """
    found = []
    left = first >> (first & -first).bit_length()
    right = (stop - 1) >> (stop & -stop).bit_length()
    while left != right:  # a deeper node has the larger number; the two paths meet
        if left > right:
            if left < floor:
                return found
            if own[left]:
                found.append(own[left])
            left >>= 1
        else:
            if right < floor:
                return found
            if own[right]:
                found.append(own[right])
            right >>= 1
    while left >= floor:
        if own[left]:
            found.append(own[left])
        left >>= 1
    return found


def _insert(
    own: list[list[int] | None],
    part: list[list[int] | None],
    tiles: list[int],
    lo: int,
    hi: int,
    floor: int,
) -> None:
    """``OccupancyIndex.add`` over precomputed ``tiles``, with the ancestors' merge stopping early.

    ``part`` climbs stop below node ``floor``: no tile of a query sits higher.
    """
    for tile in tiles:
        bounds = own[tile]
        if bounds is None:
            own[tile] = [lo, hi]
        else:
            add_range(bounds, lo, hi)
        node = tile
        while node >= floor:
            bounds = part[node]
            if bounds is None:
                part[node] = [lo, hi]
            else:
                k = bisect_right(bounds, lo)
                if k & 1 and hi <= bounds[k]:
                    break  # one range already holds [lo, hi): so do all ancestors
                _splice(bounds, lo, hi, bisect_left(bounds, lo, 0, k),
                        bisect_right(bounds, hi, k))
            node >>= 1
