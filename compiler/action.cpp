#include "compiler/action.h"

#include <array>
#include <charconv>
#include <cstring>

namespace ppc {

namespace {

// Kind names padded to 16 bytes, so that writing one is a fixed-size copy (the bytes past the
// name are overwritten or lie past the end format_action returns; its callers' buffers have
// kMaxActionText characters, and the last name starts at most 36 characters in).
struct KindName {
  char text[16];
  size_t size;
};
constexpr std::array<KindName, kNumActionKinds> kKindText = [] {
  std::array<KindName, kNumActionKinds> out{};
  for (int k = 0; k < kNumActionKinds; ++k) {
    size_t n = 0;
    for (const char* c = kKinds[k].name; *c; ++c) out[k].text[n++] = *c;
    out[k].size = n;
  }
  return out;
}();

// The plain kinds in the order parse_simple tries them: longest name first (a name that begins
// another, such as a future "R" before "RECV_F", is tried after it), in table order among equals.
constexpr std::array<ActionKind, kNumPlainKinds> kParseOrder = [] {
  std::array<ActionKind, kNumPlainKinds> out{};
  size_t n = 0;
  for (size_t len = sizeof(KindName::text); len-- > 0;)
    for (const KindInfo& k : kKinds)
      if (k.role != Role::Compound && kKindText[static_cast<size_t>(k.kind)].size == len)
        out[n++] = k.kind;
  return out;
}();

// Decimal digits of v at out; returns the end.
char* put_int(char* out, int v) {
  if (v >= 0 && v < 10) {
    *out = static_cast<char>('0' + v);
    return out + 1;
  }
  if (v >= 10 && v < 100000) {  // the usual stages and microbatches: two digits at a time
    static constexpr char kPairs[] =
        "0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243"
        "4445464748495051525354555657585960616263646566676869707172737475767778798081828384858687"
        "888990919293949596979899";
    const int n = v < 100 ? 2 : v < 1000 ? 3 : v < 10000 ? 4 : 5;
    char* end = out + n;
    char* p = end;
    unsigned u = static_cast<unsigned>(v);
    while (u >= 10) {
      p -= 2;
      std::memcpy(p, kPairs + 2 * (u % 100), 2);
      u /= 100;
    }
    if (p > out) *--p = static_cast<char>('0' + u);
    return end;
  }
  return std::to_chars(out, out + 16, v).ptr;
}

size_t int_size(int v) {
  if (v >= 0 && v < 10) return 1;
  if (v >= 10 && v < 100000) return v < 100 ? 2 : v < 1000 ? 3 : v < 10000 ? 4 : 5;
  char buf[16];
  return static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf);
}

size_t simple_size(ActionKind k, int stage, int mb) {
  return int_size(stage) + kKindText[static_cast<int>(k)].size + int_size(mb);
}

char* put_simple(char* out, ActionKind k, int stage, int mb) {
  out = put_int(out, stage);
  const KindName& name = kKindText[static_cast<int>(k)];
  std::memcpy(out, name.text, sizeof name.text);
  return put_int(out + name.size, mb);
}

// Parses "<digits>" at text[pos...]; returns false if there is none or it overflows.
bool parse_uint(std::string_view text, size_t& pos, int& value) {
  size_t start = pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
  if (pos == start) return false;
  auto [ptr, ec] = std::from_chars(text.data() + start, text.data() + pos, value);
  return ec == std::errc() && ptr == text.data() + pos;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// A plain action: <stage><KIND><microbatch>. Kinds are matched longest first.
std::optional<Action> parse_simple(std::string_view text, std::string* error) {
  size_t pos = 0;
  int stage = 0;
  if (!parse_uint(text, pos, stage)) {
    if (error) *error = "expected a stage number at the start";
    return std::nullopt;
  }
  std::string_view rest = text.substr(pos);
  for (ActionKind k : kParseOrder) {
    std::string_view name = kind_name(k);
    if (rest.substr(0, name.size()) != name) continue;
    size_t mpos = pos + name.size();
    int mb = 0;
    if (!parse_uint(text, mpos, mb)) {
      if (error) *error = "expected a microbatch number after '" + std::string(name) + "'";
      return std::nullopt;
    }
    if (mpos != text.size()) {
      if (error) *error = "unexpected text after the microbatch number";
      return std::nullopt;
    }
    return is_comm(k) ? Action::comm(k, stage, mb, -1) : Action::compute(k, stage, mb);
  }
  if (error) {
    *error = "unknown action kind";
    if (rest.substr(0, 7) == "UNSHARD" || rest.substr(0, 7) == "RESHARD" ||
        rest.substr(0, 11) == "REDUCE_GRAD")
      *error = "FSDP action '" + std::string(rest) + "' is not a pipeline action";
  }
  return std::nullopt;
}

}  // namespace

char* format_action(const Action& a, char* out) {
  if (!is_compound(a.kind)) return put_simple(out, a.kind, a.stage, a.microbatch);
  // "(<part>;<part>)<NAME>"
  const Action f = a.forward_part(), b = a.backward_part();
  *out++ = '(';
  out = put_simple(out, f.kind, f.stage, f.microbatch);
  *out++ = ';';
  out = put_simple(out, b.kind, b.stage, b.microbatch);
  *out++ = ')';
  const KindName& name = kKindText[static_cast<int>(a.kind)];
  std::memcpy(out, name.text, name.size);
  return out + name.size;
}

size_t action_text_size(const Action& a) {
  if (!is_compound(a.kind)) return simple_size(a.kind, a.stage, a.microbatch);
  const Action f = a.forward_part(), b = a.backward_part();
  return 3 + simple_size(f.kind, f.stage, f.microbatch) +  // "(", ";", ")"
         simple_size(b.kind, b.stage, b.microbatch) + kKindText[static_cast<int>(a.kind)].size;
}

void append_to(std::string& out, const Action& a) {
  char buf[kMaxActionText];
  out.append(buf, format_action(a, buf));
}

std::string to_string(const Action& a) {
  char buf[kMaxActionText];
  return std::string(buf, format_action(a, buf));
}

std::optional<Action> parse_action(std::string_view text, std::string* error) {
  text = trim(text);
  if (text.empty()) {
    if (error) *error = "empty action";
    return std::nullopt;
  }
  if (text.front() != '(') return parse_simple(text, error);
  size_t close = text.find(')');
  if (close == std::string_view::npos) {
    if (error) *error = "missing ')' in compound action";
    return std::nullopt;
  }
  if (text.substr(close + 1) != "OVERLAP_F_B") {
    if (error) *error = "a compound action must end with ')OVERLAP_F_B'";
    return std::nullopt;
  }
  std::string_view inner = text.substr(1, close - 1);
  size_t semi = inner.find(';');
  if (semi == std::string_view::npos || inner.find(';', semi + 1) != std::string_view::npos) {
    if (error) *error = "OVERLAP_F_B must hold exactly two actions, a forward and a backward";
    return std::nullopt;
  }
  std::string sub_error;
  auto f = parse_simple(trim(inner.substr(0, semi)), &sub_error);
  auto b = f ? parse_simple(trim(inner.substr(semi + 1)), &sub_error) : std::nullopt;
  if (!f || !b) {
    if (error) *error = "in OVERLAP_F_B: " + sub_error;
    return std::nullopt;
  }
  if (f->kind != ActionKind::F || !is_backward_input(b->kind)) {
    if (error) *error = "OVERLAP_F_B must hold a forward (F) then a backward (B or I)";
    return std::nullopt;
  }
  return Action::overlap(f->stage, f->microbatch, b->kind, b->stage, b->microbatch);
}

size_t ActionHash::operator()(const Action& a) const noexcept {
  uint64_t h = static_cast<uint64_t>(a.kind) | (static_cast<uint64_t>(a.sub_kind) << 8);
  h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(a.stage);
  h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(a.microbatch);
  h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(a.stage2);
  h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(a.microbatch2);
  return static_cast<size_t>(h);
}

}  // namespace ppc
