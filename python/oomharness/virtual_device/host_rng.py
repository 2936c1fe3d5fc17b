"""The host's random numbers under a fake model (issue 43).

Note [The host generator under a fake model]
In shape-only mode a Parameter registered on a module is fake from the start (Note [Shape-only mode]), so its
initialiser (nn.Linear's kaiming_uniform_, a Transformer's normal_(0, 0.02), trunc_normal_) runs on a fake and
draws nothing, where a real run's initialisation on the host draws from the CPU's default generator. Whatever
the program draws on the host after that then differs from a real run with the same seed: the DataLoader's
shuffle seed, and with it the order of the batches and, for batches padded to their longest sequence, their
shapes. Measured on the public corpus's Accelerate loop (BERT, dynamic padding, set_seed(0)): the first batch
was 32 x 120 tokens on the full virtual device and on an H200, 32 x 111 in shape-only mode, and the prediction
was 4.4% low for it.

So a random operation on a host fake (not on the device: a parameter before .cuda()) moves the CPU generator
on as the real operation would: a tensor of at most SMALL elements is drawn for real into a scratch tensor of
the same shape, type and strides (the operation's exact draws, its normal-sample cache included); a larger
contiguous one of uniform_ or normal_ (the initialisers' operations) by the count ATen's CPU kernels draw
(uniform_: one 32-bit number per element, two for float64; normal_: normal_fill's uniform per element plus 16
for a tail not a multiple of 16), drawn into a small int32 buffer (random_: one 32-bit number per element).
Drawing costs about 7 ns a number on the 2-core machine, so beyond BUDGET numbers in a run the device stops
drawing and says so (a `host_random` divergence): a 7B model's initialisation would cost 45 s for a state
only a program whose later host draws change shapes would notice. Other random operations on a large host fake
(bernoulli_, exponential_, ...) are a divergence too.
"""

import torch
from torch.utils._python_dispatch import _disable_current_modes

SMALL = 1 << 22
BUDGET = 1 << 28
_CHUNK = 1 << 20
_KNOWN = {"uniform_", "normal_"}


class HostGenerator:
    def __init__(self, device):
        self.device = device
        self.drawn = 0          # numbers drawn for host fakes in this run
        self._buffer = None

    def follow(self, func, args, kwargs):
        """A random operation `func` ran on the host fake args[0]: move the CPU generator on as it would have."""
        t = args[0]
        gen_given = bool(kwargs) and kwargs.get("generator") is not None
        numel = t.numel()
        if numel <= SMALL:
            # A plain host tensor, made and drawn with every dispatch mode off (the fake mode, the device's)
            # and past the device's factory patches: nothing booked, nothing fake.
            with _disable_current_modes():
                real = torch.ops.aten.empty_strided.default(tuple(t.shape), tuple(t.stride()), dtype=t.dtype)
                func(real, *args[1:], **(kwargs or {}))
            self.drawn += numel
            return
        name = func.overloadpacket.__name__
        if name not in _KNOWN or gen_given or not t.is_contiguous() or not t.is_floating_point():
            self._skip("a %s of %d elements on the host" % (name, numel))
            return
        draws = numel
        if name == "normal_" and numel % 16:
            draws += 16
        if t.dtype == torch.float64:
            draws *= 2
        if self.drawn + draws > BUDGET:
            self._skip("the model's initialisation draws more than %d numbers" % BUDGET)
            return
        self.drawn += draws
        with _disable_current_modes():
            if self._buffer is None:
                self._buffer = torch.ops.aten.empty.memory_format([_CHUNK], dtype=torch.int32)
            while draws > 0:
                n = min(draws, _CHUNK)
                self._buffer[:n].random_()
                draws -= n

    def _skip(self, what):
        self.device.diverged("host_random", "%s was not drawn (Note [The host generator under a fake model]): "
                             "what the program draws on the host afterwards (a DataLoader's shuffle) differs "
                             "from a real run with the same seed" % what)
