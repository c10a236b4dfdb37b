// Layouts: small helpers, model checks and placement. The parser lives in layout_parse.cpp.
#include "compiler/layout.h"

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <utility>

namespace ppc {

namespace {

std::string plural(int n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string ordinal(int n) {
  const int mod100 = n % 100;
  const char* suffix = "th";
  if (mod100 < 11 || mod100 > 13) {
    switch (n % 10) {
      case 1:
        suffix = "st";
        break;
      case 2:
        suffix = "nd";
        break;
      case 3:
        suffix = "rd";
        break;
      default:
        break;
    }
  }
  return fmt::format("{}{}", n, suffix);
}

const char* layer_name(LayerKind k) {
  switch (k) {
    case LayerKind::Embedding:
      return "embedding";
    case LayerKind::Decoder:
      return "decoder layer";
    case LayerKind::Mtp:
      return "MTP layer";
    case LayerKind::Loss:
      return "loss";
  }
  return "a layer of the model's own";
}

// A layer of the whole model, in model order, with where it was written.
struct ModelLayer {
  LayerKind kind;
  int stage;
  int index;
};

}  // namespace

void check_own_symbols(std::string_view symbols, const std::string& flag) {
  for (size_t i = 0; i < symbols.size(); ++i) {
    const char c = symbols[i];
    const auto printable = [&] {
      return c >= 0x20 && c < 0x7F ? fmt::format("'{}'", c)
                                   : fmt::format("byte 0x{:02X}", static_cast<unsigned char>(c));
    };
    if (!is_layer_symbol(c))
      throw UserError(fmt::format("{} is not a layer symbol: a model's own symbols are ASCII "
                                  "letters, as in --symbols xv",
                                  printable()),
                      input_location(flag));
    if (is_builtin(own_layer(c)))
      throw UserError(fmt::format("'{}' is built in ({}): a model's own symbols are letters other "
                                  "than E, t, m and L",
                                  c, layer_name(own_layer(c))),
                      input_location(flag));
    if (symbols.find(c) != i)
      throw UserError(fmt::format("'{}' is declared twice", c), input_location(flag));
  }
}

std::string own_symbols(const Layout& layout) {
  std::string out;
  for (const auto& stage : layout.stages)
    for (LayerKind k : stage)
      if (!is_builtin(k) && out.find(layer_symbol(k)) == std::string::npos) out += layer_symbol(k);
  return out;
}

int Layout::count(LayerKind k) const {
  int n = 0;
  for (const auto& stage : stages)
    for (LayerKind l : stage)
      if (l == k) ++n;
  return n;
}

namespace {

SourceLocation location_at(const Layout& layout, int line, int column) {
  if (line <= 0 || column <= 0) return input_location(layout.input);
  return location_in(layout.input, layout.input_lines, line, column);
}

}  // namespace

SourceLocation Layout::layer_location(int stage, int index) const {
  if (stage < 0 || static_cast<size_t>(stage) >= layer_columns.size() ||
      static_cast<size_t>(stage) >= layer_lines.size())
    return location_at(*this, 0, 0);
  const auto& cols = layer_columns[static_cast<size_t>(stage)];
  const auto& lines = layer_lines[static_cast<size_t>(stage)];
  if (index < 0 || static_cast<size_t>(index) >= cols.size() ||
      static_cast<size_t>(index) >= lines.size())
    return location_at(*this, 0, 0);
  return location_at(*this, lines[static_cast<size_t>(index)], cols[static_cast<size_t>(index)]);
}

SourceLocation Layout::stage_location(int stage) const {
  if (stage < 0 || static_cast<size_t>(stage) >= stage_columns.size() ||
      static_cast<size_t>(stage) >= stage_lines.size())
    return location_at(*this, 0, 0);
  return location_at(*this, stage_lines[static_cast<size_t>(stage)],
                     stage_columns[static_cast<size_t>(stage)]);
}

SourceLocation Layout::end_location() const {
  return location_at(*this, end_line, end_column);
}

Layout generic_layout(int n) {
  if (n < 1)
    throw UserError(fmt::format("must be at least 1, got {}", n), input_location("--stages"));
  if (n > kMaxLayoutItems)
    throw UserError(fmt::format("{} stages is too many (at most {})", n, kMaxLayoutItems),
                    input_location("--stages"));
  Layout layout;
  layout.source = fmt::format("<{} generic stages>", n);
  layout.input = "--stages";
  layout.stages.assign(static_cast<size_t>(n), {});
  return layout;
}

std::string stage_symbols(const std::vector<LayerKind>& stage) {
  if (stage.empty()) return "(empty)";
  std::string out;
  out.reserve(stage.size() * 2);
  for (LayerKind k : stage) {
    if (!out.empty()) out += ' ';
    out += layer_symbol(k);
  }
  return out;
}

const char* placement_name(PlacementStyle s) {
  switch (s) {
    case PlacementStyle::Loop:
      return "loop";
    case PlacementStyle::V:
      return "v";
  }
  return "?";
}

// --- Model rules ------------------------------------------------------------------------------

void check_model(const Layout& layout, std::optional<int> num_layers) {
  if (num_layers && *num_layers < 0)
    throw UserError(fmt::format("must be at least 0, got {}", *num_layers),
                    input_location("--num-layers"));
  std::vector<ModelLayer> model;
  for (size_t s = 0; s < layout.stages.size(); ++s)
    for (size_t i = 0; i < layout.stages[s].size(); ++i)
      model.push_back({layout.stages[s][i], static_cast<int>(s), static_cast<int>(i)});
  auto where = [&](const ModelLayer& l) { return layout.layer_location(l.stage, l.index); };

  if (model.empty()) {
    throw UserError(
        "layout has no layers: a model needs at least the embedding 'E' and the loss 'L'",
        layout.num_stages() > 0 ? layout.stage_location(0) : layout.end_location());
  }
  if (model.front().kind != LayerKind::Embedding) {
    throw UserError(fmt::format("the model must start with the embedding 'E', but its first "
                                "layer is '{}' ({})",
                                layer_symbol(model.front().kind), layer_name(model.front().kind)),
                    where(model.front()));
  }

  const ModelLayer* first_loss = nullptr;
  const ModelLayer* first_mtp = nullptr;
  int decoders = 0;
  for (size_t i = 1; i < model.size(); ++i) {
    const ModelLayer& l = model[i];
    switch (l.kind) {
      case LayerKind::Embedding:
        throw UserError("second embedding 'E': a model has exactly one, as its first layer",
                        where(l));
      case LayerKind::Loss:
        if (first_loss != nullptr)
          throw UserError("second loss 'L': a model has exactly one, as its last layer", where(l));
        first_loss = &l;
        break;
      case LayerKind::Mtp:
        if (first_mtp == nullptr) first_mtp = &l;
        break;
      case LayerKind::Decoder:
        ++decoders;
        if (first_mtp != nullptr)
          throw UserError(
              "decoder layer 't' after an MTP layer 'm': MTP layers must come after all decoder "
              "layers",
              where(l));
        if (num_layers && decoders == *num_layers + 1)
          throw UserError(fmt::format("too many decoder layers: the model has {}, and this is "
                                      "the {} 't'",
                                      *num_layers, ordinal(decoders)),
                          where(l));
        break;
    }
  }
  if (model.back().kind != LayerKind::Loss) {
    throw UserError(fmt::format("the model must end with the loss 'L', but its last layer is '{}' "
                                "({})",
                                layer_symbol(model.back().kind), layer_name(model.back().kind)),
                    where(model.back()));
  }
  if (num_layers && decoders != *num_layers) {
    throw UserError(fmt::format("too few decoder layers: the layout has {} 't' but the model "
                                "has {}",
                                decoders, *num_layers),
                    layout.end_location());
  }
}

// --- Placement --------------------------------------------------------------------------------

Placement make_placement(int num_stages, int pp, PlacementStyle style) {
  if (pp < 1)
    throw UserError(fmt::format("must be at least 1, got {}", pp), input_location("--pp"));
  if (num_stages < 1)
    throw UserError(fmt::format("must be at least 1, got {}", num_stages),
                    input_location("--stages"));
  if (num_stages % pp != 0)
    throw UserError(
        fmt::format("{} is not a multiple of --pp {}", plural(num_stages, "stage", "stages"), pp),
        input_location("--pp"));
  if (style == PlacementStyle::V && num_stages != 2 * pp)
    throw UserError(fmt::format("v placement needs exactly 2 stages per rank (2 * --pp {} = {}), "
                                "got {}",
                                pp, 2 * pp, plural(num_stages, "stage", "stages")),
                    input_location("--placement"));

  Placement p;
  p.style = style;
  p.pp = pp;
  p.vpp = num_stages / pp;
  p.stage_rank.resize(static_cast<size_t>(num_stages));
  p.stage_chunk.resize(static_cast<size_t>(num_stages));
  p.rank_stages.assign(static_cast<size_t>(pp), {});
  for (int s = 0; s < num_stages; ++s) {
    int rank = 0;
    int chunk = 0;
    if (style == PlacementStyle::Loop) {
      rank = s % pp;
      chunk = s / pp;
    } else {
      rank = s < pp ? s : 2 * pp - 1 - s;
      chunk = s < pp ? 0 : 1;
    }
    p.stage_rank[static_cast<size_t>(s)] = rank;
    p.stage_chunk[static_cast<size_t>(s)] = chunk;
  }
  // rank_stages in chunk order: chunks are numbered in increasing stage order on every rank for
  // both styles, so visiting stages in order appends them in chunk order.
  for (int s = 0; s < num_stages; ++s)
    p.rank_stages[static_cast<size_t>(p.stage_rank[static_cast<size_t>(s)])].push_back(s);
  return p;
}

Placement place_layout(const Layout& layout, int pp, std::optional<int> vpp, PlacementStyle style) {
  if (pp < 1)
    throw UserError(fmt::format("must be at least 1, got {}", pp), input_location("--pp"));
  if (vpp && *vpp < 1)
    throw UserError(fmt::format("must be at least 1, got {}", *vpp), input_location("--vpp"));
  const int n = layout.num_stages();
  if (n < 1) throw UserError("layout has no stages", layout.end_location());
  if (n % pp != 0)
    throw UserError(fmt::format("layout has {}, which is not a multiple of --pp {}",
                                plural(n, "stage", "stages"), pp),
                    layout.end_location());
  const int inferred = n / pp;
  if (vpp && *vpp != inferred)
    throw UserError(fmt::format("--vpp {} disagrees with the layout: {} at --pp {} give vpp {}",
                                *vpp, plural(n, "stage", "stages"), pp, inferred),
                    layout.end_location());
  if (style == PlacementStyle::V && n != 2 * pp)
    throw UserError(fmt::format("v placement needs exactly 2 stages per rank (2 * --pp {} = {}), "
                                "but the layout has {}",
                                pp, 2 * pp, plural(n, "stage", "stages")),
                    layout.end_location());
  return make_placement(n, pp, style);
}

}  // namespace ppc
