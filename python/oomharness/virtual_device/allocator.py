"""A model of PyTorch's CUDA caching allocator, for the virtual CUDA device (issue 13; the feasibility study's
facts are in docs/design/virtual-device.md).

Note [The caching allocator, modelled]
What a training loop's memory looks like on a GPU is decided less by its tensors than by how PyTorch's
caching allocator (c10/cuda/CUDACachingAllocator.cpp) asks the driver for memory and keeps it. The model keeps
the rules that decide what the driver sees and what `torch.cuda` reports:
  - every request is rounded up to 512 bytes (kMinBlockSize);
  - requests of at most 1 MiB (kSmallSize) are served from a small pool of 2 MiB segments (kSmallBuffer);
    larger ones from a large pool, whose segments are 20 MiB (kLargeBuffer) for requests under 10 MiB
    (kMinLargeAlloc) and the request rounded up to 2 MiB (kRoundLarge) above;
  - a request takes the smallest cached block of its pool that fits (best fit), and splits it when what
    remains is worth keeping: at least 512 bytes in the small pool, more than 1 MiB in the large one;
  - a freed block merges with free neighbours of its segment (coalescing) and stays cached;
  - when the driver refuses a new segment, the allocator frees every cached segment that is wholly free and
    asks once more, then raises an out-of-memory error with PyTorch's message. One refused segment is
    therefore absorbed, exactly as on a GPU: faults must persist (`times: 2` or more) to reach the code;
  - a fault aimed at a step is asked where each request is made, before the cache is looked in, and a
    refusal there is taken as a refused segment is (Note [Where a step fault fires] in
    injector/engine/fault_plan.h): the step's first request meets it, whatever the cache holds;
  - `empty_cache` gives every wholly free segment back to the driver.
Segments come from a SegmentSource: on the virtual device, the CUDA driver double through the shim
(DriverSegments), so that fault rules, caps, events, the control block and the armed record are the shim's own
(docs/design/DESIGN.md, "One rule engine"); in unit tests, a plain byte budget. Streams, expandable segments,
cudaMallocAsync and CUDA graphs are not modelled.
"""

from .. import oom_kinds
from .segments import BudgetSegments, DriverSegments, OutOfMemory

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(nbytes):
    """The request as the allocator books it: at least 512 bytes, a multiple of 512."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return (nbytes + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def segment_size(size):
    """What the allocator asks the driver for when no cached block fits a rounded request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


class Block:
    __slots__ = ("segment", "offset", "size", "requested", "free", "prev", "next")

    def __init__(self, segment, offset, size):
        self.segment = segment
        self.offset = offset
        self.size = size
        self.requested = 0
        self.free = True
        self.prev = None
        self.next = None


class Segment:
    __slots__ = ("handle", "size", "small", "first")

    def __init__(self, handle, size, small):
        self.handle = handle
        self.size = size
        self.small = small
        self.first = None

    def wholly_free(self):
        return self.first.free and self.first.next is None


class CachingAllocatorModel:
    """Note [The caching allocator, modelled]. `oom_error(message)` builds the exception raised to the code
    (the virtual device passes torch.cuda.OutOfMemoryError)."""

    def __init__(self, source, device=0, oom_error=None):
        self.source = source
        self.device = device
        self.oom_error = oom_error or (lambda message: MemoryError(message))
        self.segments = []
        self.free_small = []  # free blocks, kept unsorted: pools stay small enough for a linear best fit
        self.free_large = []
        self.allocated = 0          # bytes of blocks in use (rounded), as torch.cuda.memory_allocated
        self.reserved = 0           # bytes of segments held, as torch.cuda.memory_reserved
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.alloc_count = 0
        self.free_count = 0
        self.segment_count = 0      # segments ever asked of the driver
        self.num_alloc_retries = 0  # segments refused, then asked again after freeing the cache
        self.num_ooms = 0
        self.fraction_limit = None  # set_per_process_memory_fraction, as bytes
        self.before_new_segment = None  # called before the driver is asked for a segment: frees may be pending
        self.oom_observers = []     # torch._C._cuda_attach_out_of_memory_observer's callbacks

    # ---- what the code does
    def malloc(self, nbytes):
        size = round_size(nbytes)
        if self.source.request(size):
            self._request_refused(size)
        small = size <= SMALL_SIZE
        pool = self.free_small if small else self.free_large
        block = self._best_fit(pool, size)
        if block is None and self.before_new_segment is not None:
            self.before_new_segment()  # the virtual device gives back the blocks of storages that died
            block = self._best_fit(pool, size)
        if block is None:
            block = self._new_segment(size, small)
        pool_of_block = self.free_small if block.segment.small else self.free_large
        if block in pool_of_block:
            pool_of_block.remove(block)
        block = self._split(block, size)
        block.free = False
        block.requested = nbytes
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.alloc_count += 1
        return block

    def free(self, block):
        if block.free:
            raise ValueError("block freed twice")
        block.free = True
        self.allocated -= block.size
        self.free_count += 1
        block = self._merge(block)
        (self.free_small if block.segment.small else self.free_large).append(block)

    def empty_cache(self):
        """Gives every wholly free segment back to the driver; returns the bytes given back."""
        given = 0
        for seg in list(self.segments):
            if seg.wholly_free():
                given += self._release(seg)
        return given

    # ---- what torch.cuda reports
    def stats(self):
        """A subset of torch.cuda.memory_stats(), under PyTorch's key names."""
        inactive = sum(b.size for b in self.free_small + self.free_large)
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak_allocated,
            "reserved_bytes.all.current": self.reserved,
            "reserved_bytes.all.peak": self.peak_reserved,
            "active_bytes.all.current": self.allocated,
            "inactive_split_bytes.all.current": sum(b.size for b in self.free_small + self.free_large
                                                    if not b.segment.wholly_free()),
            "segment.all.current": len(self.segments),
            "allocation.all.current": self.alloc_count - self.free_count,
            "num_alloc_retries": self.num_alloc_retries,
            "num_ooms": self.num_ooms,
            "free_cached_bytes": inactive,
        }

    def reset_peak(self):
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved

    # ---- internals
    def _best_fit(self, pool, size):
        best = None
        for b in pool:
            if b.size >= size and (best is None or b.size < best.size):
                best = b
        return best

    def _request_refused(self, size):
        """The shim refused this request where it was made (Note [Where a step fault fires]): taken as a refused
        segment is, the allocator frees what is cached and asks once more, and gives up when that is refused."""
        self.num_alloc_retries += 1
        if self.before_new_segment is not None:
            self.before_new_segment()  # storages that died give their blocks back first, as on a GPU
        self.empty_cache()
        if self.source.request(size):
            self._give_up(size)

    def _give_up(self, size):
        self.num_ooms += 1
        # As the native allocator does, the OOM observers hear of it once the allocator gives up.
        for observer in list(self.oom_observers):
            observer(self.device, size, self.allocated, self._mem_info_or_zero()[0])
        raise self.oom_error(self._oom_message(size))

    def _new_segment(self, size, small):
        want = segment_size(size)
        if self.fraction_limit is not None and self.reserved + want > self.fraction_limit:
            handle = None
        else:
            handle = self._ask(want)
        if handle is None:
            # The allocator's own retry: free what is cached, ask once more.
            self.num_alloc_retries += 1
            self.empty_cache()
            if self.fraction_limit is None or self.reserved + want <= self.fraction_limit:
                handle = self._ask(want)
        if handle is None:
            self._give_up(size)
        seg = Segment(handle, want, small)
        seg.first = Block(seg, 0, want)
        self.segments.append(seg)
        self.segment_count += 1
        self.reserved += want
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return seg.first

    def _ask(self, size):
        try:
            return self.source.alloc(size)
        except OutOfMemory:
            return None

    def _release(self, seg):
        block = seg.first
        (self.free_small if seg.small else self.free_large).remove(block)
        self.source.free(seg.handle, seg.size)
        self.segments.remove(seg)
        self.reserved -= seg.size
        return seg.size

    def _split(self, block, size):
        remaining = block.size - size
        worth = remaining >= MIN_BLOCK if block.segment.small else remaining > SMALL_SIZE
        if not worth:
            return block
        rest = Block(block.segment, block.offset + size, remaining)
        rest.prev, rest.next = block, block.next
        if block.next is not None:
            block.next.prev = rest
        block.next = rest
        block.size = size
        (self.free_small if block.segment.small else self.free_large).append(rest)
        return block

    def _merge(self, block):
        pool = self.free_small if block.segment.small else self.free_large
        for neighbour in (block.prev, block.next):
            if neighbour is None or not neighbour.free:
                continue
            pool.remove(neighbour)
            first, second = (neighbour, block) if neighbour is block.prev else (block, neighbour)
            first.size += second.size
            first.next = second.next
            if second.next is not None:
                second.next.prev = first
            block = first
        if block.prev is None:
            block.segment.first = block
        return block

    def mem_info(self):
        """(free, total) as torch.cuda.mem_get_info reports them: the driver's figures; under
        set_per_process_memory_fraction, the fraction is the total and what is not reserved of it is free."""
        free, total = self.source.mem_info()
        if self.fraction_limit is not None:
            total = min(total, self.fraction_limit) if total else self.fraction_limit
            free = max(0, total - self.reserved)
        return free, total

    def _mem_info_or_zero(self):
        try:
            return self.mem_info()
        except Exception:  # noqa: BLE001 - an OOM is still reported when the driver cannot say
            return 0, 0

    def _oom_message(self, size):
        free, total = self._mem_info_or_zero()
        return oom_kinds.allocator_message(size, self.device, total, free, self.allocated, self.reserved - self.allocated)


__all__ = ["CachingAllocatorModel", "round_size",
           "segment_size"]

