#pragma once
// What EventLogReader reads of a line without building JSON (event_log_reader.cpp).
//
// Note [Fast event lines]
// The lines a probe or the shim writes (include/oomharness/events.h) have one shape: "t", "pid", "src",
// "kind" and a flat "fields" object of numbers, plain strings, booleans and nulls, in that order, with or
// without blanks between the tokens. scan_line reads that shape without building JSON, enough to fold a routine line and decide its fate; any other line (escapes,
// nesting, non-ASCII text, other key orders, a float where a count is expected) goes to the JSON parser,
// and a kept line is parsed by it when kept. scan_line accepts only what the parser accepts, and reads the
// figures as Event's readers would.

#include <cstdint>
#include <string_view>

#include "oomharness/policies/trace.h"

namespace oomh {

struct EventLogReader::Facts {
  enum class Kind { other, step, phase, samples, memory };
  Kind kind = Kind::other;  // routine kinds (src "probe")
  bool inject = false;
  double t = 0;
  int pid = 0;
  bool has_step = false;
  int64_t step = -1, batch = -1, allocated = -1, reserved = -1, count = 0;
  int grads = -1;  // -1: not said, 0: not cleared, 1: said (cleared, or not a boolean)
};

// The same figures of an event already parsed (a line scan_line sent to the JSON parser).
EventLogReader::Facts facts_of(const Event& e);

// Note [Fast event lines]: false sends the line to the JSON parser.
bool scan_line(std::string_view line, EventLogReader::Facts& f);

}  // namespace oomh
