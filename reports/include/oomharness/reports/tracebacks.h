#pragma once
// The user's traceback: the harness's own Python frames folded out of a job's output tail.
//
// Note [The user's traceback]
// On the virtual device and under the probe, a traceback that reaches the job's stderr passes through the
// harness's own modules (the device's dispatch mode, the caching-allocator model, the probe's hooks): an
// out-of-memory error raised by the model ends in frames of virtual_device.py and caching_allocator.py,
// which reads as if the tool had crashed (issue 29). The tails that the terminal, results.json and the
// reports show fold each run of consecutive frames of python/oomharness/*.py into one line that says how
// many frames of which part were folded, and that the attempt's log keeps them: the log file itself stays
// complete (it is written by the runner as the job prints, before any folding). A frame is Python's
// `  File "PATH", line N, in NAME` line with the lines indented under it (the source line, the carets).
// Only files named like the package's modules inside a folder named `oomharness` are folded, so a user's
// file is never hidden; a traceback with nothing of ours is returned unchanged, byte for byte.

#include <string>
#include <string_view>

namespace oomh {

std::string fold_harness_frames(std::string_view output);

}  // namespace oomh
