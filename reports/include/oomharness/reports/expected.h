#pragma once
// The reports' error tier that a caller may handle: a value or a message that names the file
// ("results.json:3:14: syntax error ..."), the one result type (Note [One result type] in
// include/oomharness/expected.h) with a message for its error.

#include <string>

#include "oomharness/expected.h"

namespace oomh {

template <class T>
using ReportExpected = Expected<T, std::string>;

struct Written {};  // what a successful write returns

}  // namespace oomh
