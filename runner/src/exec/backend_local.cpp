// The local backend: the job runner itself (Note [Backends] in backend.h).

#include "oomharness/runner/backend.h"
#include "oomharness/runner/name_tables.h"

namespace oomh {

namespace {

class LocalBackend final : public Backend {
 public:
  explicit LocalBackend(RunOptions options) : runner_(std::move(options)) {}
  std::optional<std::string> check() override { return std::nullopt; }
  std::vector<JobOutcome> run(const std::vector<JobSpec>& jobs) override { return runner_.run(jobs); }
  void interrupt() noexcept override { runner_.interrupt(); }
  bool interrupted() const noexcept override { return runner_.interrupted(); }
  void stop_starting() override { runner_.stop_starting(); }

 private:
  JobRunner runner_;
};

}  // namespace

std::optional<BackendKind> backend_from_name(const std::string& name) { return value_named(kBackends, name); }

std::unique_ptr<Backend> make_local_backend(RunOptions options) { return std::make_unique<LocalBackend>(std::move(options)); }

}  // namespace oomh
