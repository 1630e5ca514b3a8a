/*************************************************************************
 * The little JSON the plugin needs: a strict reader (the perf binary's
 * calibration table; the tests read the plugin's own report with it) and
 * the writer's two leaves, strings and numbers, which keep every report
 * valid JSON. Not on any event path.
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_JSON_H_
#define NCCL_DCP_PLUGIN_JSON_H_

#include <string>
#include <utility>
#include <vector>

namespace nccl_dcp {
namespace plugin {
namespace json {

struct Value {
  enum Type { Null, Bool, Number, String, Array, Object } type = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  // in file order

  // Member `key` of an object, or null (also when this is no object).
  const Value* find(const std::string& key) const;
  bool isNumber() const { return type == Number; }
};

// Parses all of `text`; false with *error ("offset N: what") otherwise.
// Numbers follow JSON's grammar exactly (no inf, nan, hex or leading +)
// and must fit a double: 1e999 is refused, not read as infinity.
bool parse(const std::string& text, Value* out, std::string* error);

// `s` as a JSON string literal, quotes included.
std::string quote(const std::string& s);
// `v` as a JSON number, the shortest text that reads back to it, in any
// locale; null when it is not finite (JSON has no inf or nan).
std::string number(double v);

}  // namespace json
}  // namespace plugin
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PLUGIN_JSON_H_
