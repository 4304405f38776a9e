// The tree-walking evaluator: scopes (jinja2's: for-loops and macros open a scope, if-blocks do
// not), loop variables, macros with caller, namespaces, globals, operators with Python semantics.
// Over 500 lines: one recursive walk over statements and expressions sharing the scope chain and
// the render limits; split, each half would need the other's internals.
#include "model/text/jinja/evaluator.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>

#include "model/text/jinja/builtins.hpp"

namespace coserve::jinja {
namespace {

struct frame;
using frame_ptr = std::shared_ptr<frame>;

struct frame {
  frame_ptr parent;
  std::vector<std::pair<std::string, jvalue>> vars;

  const jvalue* lookup(std::string_view name) const {
    for (const frame* f = this; f; f = f->parent.get())
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(std::string_view name, jvalue v) {
    for (auto& [k, x] : vars)
      if (k == name) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(std::string(name), std::move(v));
  }
};

enum class flow { normal, brk, cont };

// The key under which a recursive loop's `loop` dict holds its call (no template can write it).
constexpr const char* k_call_key =
    "\x01"
    "call";

constexpr int64_t k_max_range = 100000;  // jinja2's sandbox MAX_RANGE

jvalue func(std::string name, std::function<jvalue(call_args&)> fn) {
  auto f = new_func();
  f->name = std::move(name);
  f->fn = std::move(fn);
  return jvalue(std::move(f));
}

[[noreturn]] void undefined_error(const jvalue& v) { throw template_error(v.undefined_hint()); }

// Python ints are unbounded; ours are 64-bit, and a result beyond that is an error, not a wrap.
[[noreturn]] void overflow_error() {
  throw template_error("integer overflow (results must fit in 64 bits)");
}

// x op y for op in + - *, or overflow_error().
int64_t checked(char op, int64_t x, int64_t y) {
  int64_t r = 0;
  const bool over = op == '+'   ? __builtin_add_overflow(x, y, &r)
                    : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                : __builtin_mul_overflow(x, y, &r);
  if (over) overflow_error();
  return r;
}

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t r = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(r, base, &r)) overflow_error();
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) overflow_error();
  }
  return r;
}

// A string or list of `n` bytes/items is about to be built; `max_bytes` 0 means no bound.
void check_size(std::size_t n, std::size_t max_bytes) {
  if (max_bytes && n > max_bytes)
    throw template_error("the template built a value of " + std::to_string(n) +
                         " bytes or items, over the " + std::to_string(max_bytes) + " limit");
}

jvalue arith(const std::string& op, const jvalue& a, const jvalue& b, std::size_t max_bytes) {
  // str % Undefined: Python's str.__mod__ takes it as a mapping (jinja2's Undefined has
  // __getitem__).
  if (op == "%" && a.is_string() && b.is_undefined()) return jvalue(percent_format(a.str(), b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(a.str().size() + b.str().size(), max_bytes);
      if (a.markup == b.markup) {
        jvalue r(a.str() + b.str());
        r.markup = a.markup;
        return r;
      }
      jvalue r(a.markup ? a.str() + html_escape(b.str()) : html_escape(a.str()) + b.str());
      r.markup = true;
      return r;
    }
    if (a.is_list() && b.is_list()) {
      check_size(a.lst().items.size() + b.lst().items.size(), max_bytes);
      auto items = a.lst().items;
      items.insert(items.end(), b.lst().items.begin(), b.lst().items.end());
      return jvalue::list(std::move(items), a.lst().tuple);
    }
  }
  if (op == "*") {
    const jvalue* seq = a.is_string() || a.is_list()   ? &a
                        : b.is_string() || b.is_list() ? &b
                                                       : nullptr;
    const jvalue* n = seq == &a ? &b : &a;
    if (seq && (n->is_int() || n->is_bool())) {
      int64_t times = n->as_int();
      const std::size_t len = seq->is_string() ? seq->str().size() : seq->lst().items.size();
      if (times > 0 && len > 0) {
        if (static_cast<uint64_t>(times) > SIZE_MAX / len) overflow_error();
        check_size(static_cast<std::size_t>(times) * len, max_bytes);
      }
      if (seq->is_string()) {
        std::string out;
        if (times > 0) out.reserve(static_cast<std::size_t>(times) * len);
        for (int64_t i = 0; i < times; ++i) out += seq->str();
        return jvalue(std::move(out));
      }
      std::vector<jvalue> out;
      if (times > 0) out.reserve(static_cast<std::size_t>(times) * len);
      for (int64_t i = 0; i < times; ++i)
        out.insert(out.end(), seq->lst().items.begin(), seq->lst().items.end());
      return jvalue::list(std::move(out));
    }
  }
  if (op == "%" && a.is_string()) return jvalue(percent_format(a.str(), b));
  if (!a.is_number() || !b.is_number())
    throw template_error("unsupported operand type(s) for " + op + ": '" + a.type_name() +
                         "' and '" + b.type_name() + "'");
  bool ints = !a.is_float() && !b.is_float();
  if (op == "+")
    return ints ? jvalue(checked('+', a.as_int(), b.as_int()))
                : jvalue(a.as_float() + b.as_float());
  if (op == "-")
    return ints ? jvalue(checked('-', a.as_int(), b.as_int()))
                : jvalue(a.as_float() - b.as_float());
  if (op == "*")
    return ints ? jvalue(checked('*', a.as_int(), b.as_int()))
                : jvalue(a.as_float() * b.as_float());
  if (op == "/") {
    if (b.as_float() == 0.0) throw template_error("division by zero");
    return jvalue(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (b.as_float() == 0.0)
      throw template_error(op == "%" ? "integer modulo by zero"
                                     : "integer division or modulo by zero");
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) {
        if (op == "%") return jvalue(int64_t{0});
        overflow_error();
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return op == "//" ? jvalue(q) : jvalue(m);
    }
    // CPython's float divmod: the remainder from fmod (exact), its sign from the divisor.
    const double x = a.as_float(), y = b.as_float();
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0.0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    double floordiv;
    if (div != 0.0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return op == "//" ? jvalue(floordiv) : jvalue(mod);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) return jvalue(int_pow(a.as_int(), b.as_int()));
    return jvalue(std::pow(a.as_float(), b.as_float()));
  }
  throw template_error("unknown operator " + op);
}

jvalue slice_of(const jvalue& v, const jvalue& start, const jvalue& stop, const jvalue& step) {
  std::vector<jvalue> items;
  std::vector<size_t> cps;  // strings: where each code point starts, then the end
  bool is_str = v.is_string();
  if (is_str)
    cps = code_point_offsets(v.str());
  else if (v.is_list())
    items = v.lst().items;
  else if (v.is_undefined())
    undefined_error(v);
  else
    throw template_error("'" + v.type_name() + "' object is not subscriptable");
  auto n = static_cast<int64_t>(is_str ? cps.size() - 1 : items.size());
  int64_t st = step.is_none() || step.is_undefined() ? 1 : step.as_int();
  if (st == 0) throw template_error("slice step cannot be zero");
  auto norm = [&](const jvalue& x, int64_t def, int64_t lo, int64_t hi) {
    if (x.is_none() || x.is_undefined()) return def;
    int64_t i = x.as_int();
    if (i < 0) i += n;
    return std::clamp(i, lo, hi);
  };
  int64_t b = st > 0 ? norm(start, 0, 0, n) : norm(start, n - 1, -1, n - 1);
  int64_t e = st > 0 ? norm(stop, n, 0, n) : norm(stop, -1, -1, n - 1);
  if (is_str && st == 1)  // a contiguous run of code points: one copy
    return jvalue(b < e ? v.str().substr(cps[size_t(b)], cps[size_t(e)] - cps[size_t(b)])
                        : std::string());
  std::vector<jvalue> out;
  std::string sout;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    if (is_str)
      sout.append(v.str(), cps[size_t(i)], cps[size_t(i) + 1] - cps[size_t(i)]);
    else
      out.push_back(items[static_cast<size_t>(i)]);
    if (__builtin_add_overflow(i, st, &i)) break;  // a step past int64 also passes the end
  }
  if (is_str) return jvalue(std::move(sout));
  return jvalue::list(std::move(out), v.lst().tuple);
}

class evaluator {
 public:
  evaluator(std::optional<std::time_t> now, const template_limits& limits)
      : now_(now), limits_(limits) {}

  std::string run(const body& tree, const json::value& context) {
    auto root = std::make_shared<frame>();
    install_globals(*root);
    if (context.is_object())
      for (const auto& [k, v] : context.as_object()) root->set(k, from_json(v));
    std::string out;
    exec(tree, root, out);
    return out;
  }

 private:
  void step() { charge(1); }
  void charge(uint64_t n) {
    if (limits_.max_steps && (steps_ += n) > limits_.max_steps)
      throw template_error("the template ran past its limit of " +
                           std::to_string(limits_.max_steps) + " steps");
  }

  // One step and one level of nesting for as long as it lives.
  struct nest {
    explicit nest(evaluator& e) : ev(e) {
      e.step();
      if (e.limits_.max_depth && e.depth_ >= e.limits_.max_depth)
        throw template_error("maximum recursion depth exceeded (" +
                             std::to_string(e.limits_.max_depth) + ")");
      ++e.depth_;
    }
    ~nest() { --ev.depth_; }
    nest(const nest&) = delete;
    nest& operator=(const nest&) = delete;
    evaluator& ev;
  };

  void install_globals(frame& f) {
    f.set("raise_exception", func("raise_exception", [](call_args& a) -> jvalue {
            throw raised_error(a.get(0, "message", jvalue("")).to_str());
          }));
    std::optional<std::time_t> now = now_;
    f.set("strftime_now", func("strftime_now", [now](call_args& a) {
            std::time_t t = now ? *now : std::time(nullptr);
            std::tm tm{};
            localtime_r(&t, &tm);
            char buf[256];
            size_t n = std::strftime(buf, sizeof buf,
                                     a.get(0, "format", jvalue("")).to_str().c_str(), &tm);
            return jvalue(std::string(buf, n));
          }));
    f.set("namespace", func("namespace", [](call_args& a) {
            auto d = new_dict();
            d->is_namespace = true;
            for (const auto& p : a.pos)
              if (p.is_dict())
                for (const auto& [k, v] : p.dct().items) d->set(k, v);
            for (const auto& [k, v] : a.kw) d->set(k, v);
            return jvalue(std::move(d));
          }));
    f.set("dict", func("dict", [](call_args& a) {
            jvalue d = jvalue::dict();
            for (const auto& p : a.pos)
              if (p.is_dict())
                for (const auto& [k, v] : p.dct().items) d.dct().set(k, v);
            for (const auto& [k, v] : a.kw) d.dct().set(k, v);
            return d;
          }));
    f.set("range", func("range", [](call_args& a) {
            int64_t start = 0, stop = 0, step = 1;
            if (a.pos.size() == 1)
              stop = a.pos[0].as_int();
            else if (a.pos.size() >= 2) {
              start = a.pos[0].as_int();
              stop = a.pos[1].as_int();
            }
            if (a.pos.size() >= 3) step = a.pos[2].as_int();
            if (step == 0) throw template_error("range() arg 3 must not be zero");
            // The length without overflow; jinja2's sandbox refuses ranges longer than 100000.
            const wide_int span = step > 0 ? wide_int{stop} - start : wide_int{start} - stop;
            const wide_int abs_step = step > 0 ? wide_int{step} : -wide_int{step};
            const wide_int len = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
            if (len > k_max_range)
              throw template_error(
                  "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            std::vector<jvalue> out;
            for (int64_t i = 0; i < static_cast<int64_t>(len); ++i)
              out.emplace_back(static_cast<int64_t>(wide_int{start} + wide_int{i} * step));
            return jvalue::list(std::move(out));
          }));
  }

  flow exec(const body& b, const frame_ptr& f, std::string& out) {
    for (const auto& n : b) {
      flow fl = exec_node(*n, f, out);
      if (fl != flow::normal) return fl;
    }
    return flow::normal;
  }

  flow exec_node(const node& n, const frame_ptr& f, std::string& out) {
    nest guard(*this);
    flow fl = exec_node_unchecked(n, f, out);
    check_size(out.size(), limits_.max_bytes);
    return fl;
  }

  flow exec_node_unchecked(const node& n, const frame_ptr& f, std::string& out) {
    switch (n.k) {
      case node::kind::text:
        out += n.text;
        return flow::normal;
      case node::kind::output:
        out += eval(*n.e, f).to_str();
        return flow::normal;
      case node::kind::if_:
        for (const auto& [cond, children] : n.branches)
          if (!cond || eval(*cond, f).truthy()) return exec(children, f, out);
        return flow::normal;
      case node::kind::for_:
        return exec_for(n, f, out);
      case node::kind::set:
        assign(n, eval(*n.e, f), f);
        return flow::normal;
      case node::kind::set_block: {
        std::string s;
        exec(n.children, f, s);
        jvalue v(std::move(s));
        if (n.e) v = eval_filter(*n.e, f, &v);
        assign(n, v, f);
        return flow::normal;
      }
      case node::kind::macro:
        f->set(n.text, make_macro(n, f));
        return flow::normal;
      case node::kind::call_block: {
        const expr& call = *n.e;
        if (call.k != expr::kind::call) throw template_error("call block expects a call");
        jvalue callee = eval(*call.args[0], f);
        call_args a = eval_args(call, f, 1);
        a.kw.emplace_back("caller", make_macro(n, f));
        out += invoke(callee, a).to_str();
        return flow::normal;
      }
      case node::kind::filter_block: {
        std::string s;
        exec(n.children, f, s);
        jvalue v(std::move(s));
        out += eval_filter(*n.e, f, &v).to_str();
        return flow::normal;
      }
      case node::kind::generation:
        return exec(n.children, f, out);
      case node::kind::with: {  // values evaluated in the enclosing scope, bound in the block's
        auto scope = std::make_shared<frame>();
        scope->parent = f;
        for (const auto& [name, value] : n.params) scope->set(name, eval(*value, f));
        return exec(n.children, scope, out);
      }
      case node::kind::break_:
        return flow::brk;
      case node::kind::continue_:
        return flow::cont;
    }
    return flow::normal;
  }

  void assign(const node& n, const jvalue& v, const frame_ptr& f) {
    if (n.attr_target) {
      const jvalue* obj = f->lookup(n.targets[0]);
      if (!obj || !obj->is_dict() || !obj->dct().is_namespace)
        throw template_error("cannot assign attribute on non-namespace object");
      obj->dct().set(n.targets[1], v);
      return;
    }
    if (n.targets.size() == 1) {
      f->set(n.targets[0], v);
      return;
    }
    auto items = iterate(v);
    if (items.size() != n.targets.size())
      throw template_error("cannot unpack: wrong number of values");
    for (size_t i = 0; i < items.size(); ++i) f->set(n.targets[i], items[i]);
  }

  void bind_targets(const node& n, const jvalue& item, frame& f) {
    if (n.targets.size() == 1) {
      f.set(n.targets[0], item);
      return;
    }
    auto items = iterate(item);
    if (items.size() != n.targets.size())
      throw template_error("not enough values to unpack (expected " +
                           std::to_string(n.targets.size()) + ")");
    for (size_t i = 0; i < items.size(); ++i) f.set(n.targets[i], items[i]);
  }

  // `seq` and `depth`: a recursive loop's loop(items) call runs the same loop over its items.
  flow exec_for(const node& n, const frame_ptr& f, std::string& out, const jvalue* seq_in = nullptr,
                int64_t depth = 1) {
    jvalue seq = seq_in ? *seq_in : eval(*n.e, f);
    std::vector<jvalue> items = iterate(seq);
    auto scope = std::make_shared<frame>();
    scope->parent = f;
    if (n.cond) {
      std::vector<jvalue> kept;
      for (const auto& x : items) {
        bind_targets(n, x, *scope);
        if (eval(*n.cond, scope).truthy()) kept.push_back(x);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      // The else body runs in the enclosing scope; a break/continue there belongs to an outer loop.
      return exec(n.else_children, f, out);
    }
    size_t len = items.size();
    // loop.changed(*values): true on the first call and whenever the values differ from the last
    // call's (jinja2's LoopContext.changed), so its memory spans the iterations.
    auto last_changed = std::make_shared<std::optional<std::vector<jvalue>>>();
    bool completed = false;
    for (size_t i = 0; i < len; ++i) {
      step();
      // Each iteration starts from a fresh scope: what one iteration sets is gone in the next.
      scope = std::make_shared<frame>();
      scope->parent = f;
      jvalue loop = jvalue::dict();
      jdict& l = loop.dct();
      l.set("index", jvalue(i + 1));
      l.set("index0", jvalue(i));
      l.set("revindex", jvalue(len - i));
      l.set("revindex0", jvalue(len - i - 1));
      l.set("first", jvalue(i == 0));
      l.set("last", jvalue(i + 1 == len));
      l.set("length", jvalue(len));
      l.set("depth", jvalue(depth));
      l.set("depth0", jvalue(depth - 1));
      if (n.recursive) {  // loop(items): the body over items, one level deeper (jinja2's recursive
                          // loops)
        const node* np = &n;
        frame_ptr outer = f;
        l.set(k_call_key, func("loop", [this, np, outer, depth](call_args& a) {
                if (a.pos.size() != 1) throw template_error("loop() takes exactly one argument");
                step();
                std::string s;
                exec_for(*np, outer, s, &a.pos[0], depth + 1);
                return jvalue(std::move(s));
              }));
      }
      l.set("previtem", i > 0 ? items[i - 1] : jvalue::undefined("there is no previous item"));
      l.set("nextitem", i + 1 < len ? items[i + 1] : jvalue::undefined("there is no next item"));
      l.set("cycle", func("cycle", [i](call_args& a) {
              if (a.pos.empty()) throw template_error("no items for cycling given");
              return a.pos[i % a.pos.size()];
            }));
      l.set("changed", func("changed", [last_changed](call_args& a) {
              const auto& prev = *last_changed;
              bool same = prev && prev->size() == a.pos.size();
              for (size_t k = 0; same && k < a.pos.size(); ++k) same = equals((*prev)[k], a.pos[k]);
              *last_changed = a.pos;
              return jvalue(!same);
            }));
      scope->set("loop", loop);
      bind_targets(n, items[i], *scope);
      flow fl = exec(n.children, scope, out);
      if (fl == flow::brk) break;
      if (fl == flow::normal) completed = true;
    }
    // jinja2 marks an iteration done at the end of its body, so the else block also runs when
    // every iteration left early through continue, or the first one through break.
    if (!completed && !n.else_children.empty()) return exec(n.else_children, f, out);
    return flow::normal;
  }

  // A macro (or a call block's caller): renders its body in a scope whose parent is the scope it
  // was defined in. The closure holds that scope weakly: scopes own the macros defined in them, a
  // strong reference would make a cycle.
  jvalue make_macro(const node& n, const frame_ptr& defining) {
    std::weak_ptr<frame> weak = defining;
    const node* np = &n;
    return func(n.k == node::kind::macro ? n.text : "caller", [this, np, weak](call_args& a) {
      frame_ptr parent = weak.lock();
      if (!parent) throw template_error("macro called outside of its scope");
      auto scope = std::make_shared<frame>();
      scope->parent = parent;
      const auto& params = np->params;
      std::vector<jvalue> extra;
      for (size_t i = 0; i < a.pos.size(); ++i) {
        if (i < params.size())
          scope->set(params[i].first, a.pos[i]);
        else
          extra.push_back(a.pos[i]);
      }
      jvalue kwargs = jvalue::dict();
      for (const auto& [k, v] : a.kw) {
        bool is_param = k == "caller";
        for (const auto& p : params) is_param = is_param || p.first == k;
        if (is_param)
          scope->set(k, v);
        else
          kwargs.dct().set(k, v);
      }
      for (size_t i = a.pos.size(); i < params.size(); ++i) {
        bool given = false;
        for (const auto& kv : a.kw) given = given || kv.first == params[i].first;
        if (given) continue;
        scope->set(params[i].first,
                   params[i].second ? eval(*params[i].second, scope)
                                    : jvalue::undefined("'" + params[i].first + "' is undefined"));
      }
      scope->set("varargs", jvalue::list(std::move(extra), true));  // a tuple, as in Python
      scope->set("kwargs", kwargs);
      bool has_caller = false;
      for (const auto& kv : a.kw) has_caller = has_caller || kv.first == "caller";
      if (!has_caller && !scope->lookup("caller"))
        scope->set("caller", jvalue::undefined("'caller' is undefined"));
      std::string out;
      exec(np->children, scope, out);
      return jvalue(std::move(out));
    });
  }

  jvalue invoke(const jvalue& callee, call_args& a) {
    if (callee.is_undefined()) undefined_error(callee);
    if (callee.is_dict())  // a recursive loop's `loop`
      if (const jvalue* c = callee.dct().find(dict_key(jvalue(std::string(k_call_key))));
          c && c->is_func())
        return c->fn().fn(a);
    if (!callee.is_func()) throw template_error("'" + callee.type_name() + "' is not callable");
    return callee.fn().fn(a);
  }

  call_args eval_args(const expr& e, const frame_ptr& f, size_t first) {
    call_args a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], f));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, f));
    return a;
  }

  // A filter node; `subject` replaces the innermost missing subject (filter blocks, set blocks).
  jvalue eval_filter(const expr& e, const frame_ptr& f, const jvalue* subject) {
    jvalue in;
    if (e.args[0])
      in = e.args[0]->k == expr::kind::filter && subject ? eval_filter(*e.args[0], f, subject)
                                                         : eval(*e.args[0], f);
    else if (subject)
      in = *subject;
    call_args a = eval_args(e, f, 1);
    return apply_filter(e.name, in, a);
  }

  jvalue eval(const expr& e, const frame_ptr& f) {
    nest guard(*this);
    jvalue v = eval_unchecked(e, f);
    // A string or list costs steps by its size too (one per 32 bytes or items), so that building
    // big values (range(), string products, filters over long lists) counts against max_steps
    // like the loops that could build them.
    if (v.is_string()) {
      check_size(v.str().size(), limits_.max_bytes);
      charge(v.str().size() / 32);
    } else if (v.is_list()) {
      check_size(v.lst().items.size(), limits_.max_bytes);
      charge(v.lst().items.size() / 32);
    }
    return v;
  }

  jvalue eval_unchecked(const expr& e, const frame_ptr& f) {
    switch (e.k) {
      case expr::kind::literal:
        return e.lit;
      case expr::kind::name: {
        if (const jvalue* v = f->lookup(e.name)) return *v;
        return jvalue::undefined("'" + e.name + "' is undefined");
      }
      case expr::kind::list:
      case expr::kind::tuple: {
        std::vector<jvalue> items;
        for (const auto& x : e.args) items.push_back(eval(*x, f));
        return jvalue::list(std::move(items), e.k == expr::kind::tuple);
      }
      case expr::kind::dict: {
        jvalue d = jvalue::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          jvalue k = eval(*e.args[i], f);
          d.dct().set(dict_key(k), eval(*e.args[i + 1], f));
        }
        return d;
      }
      case expr::kind::attr:
        return get_attr(eval(*e.args[0], f), e.name);
      case expr::kind::index:
        return get_item(eval(*e.args[0], f), eval(*e.args[1], f));
      case expr::kind::slice: {
        auto opt = [&](size_t i) { return e.args[i] ? eval(*e.args[i], f) : jvalue(); };
        return slice_of(eval(*e.args[0], f), opt(1), opt(2), opt(3));
      }
      case expr::kind::call: {
        jvalue callee = eval(*e.args[0], f);
        call_args a = eval_args(e, f, 1);
        return invoke(callee, a);
      }
      case expr::kind::filter:
        return eval_filter(e, f, nullptr);
      case expr::kind::test: {
        jvalue v = eval(*e.args[0], f);
        call_args a = eval_args(e, f, 1);
        bool r = apply_test(e.name, v, a);
        return jvalue(e.negate ? !r : r);
      }
      case expr::kind::unop: {
        jvalue v = eval(*e.args[0], f);
        if (e.name == "not") return jvalue(!v.truthy());
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number())
          throw template_error("bad operand type for unary " + e.name + ": '" + v.type_name() +
                               "'");
        if (e.name == "-") {
          if (v.is_float()) return jvalue(-v.as_float());
          if (v.as_int() == INT64_MIN) overflow_error();
          return jvalue(-v.as_int());
        }
        return v.is_float() ? jvalue(v.as_float()) : jvalue(v.as_int());
      }
      case expr::kind::binop:
        return eval_binop(e, f);
      case expr::kind::compare:
        return eval_compare_chain(e, f);
      case expr::kind::cond: {
        if (eval(*e.args[1], f).truthy()) return eval(*e.args[0], f);
        if (e.args[2]) return eval(*e.args[2], f);
        return jvalue::undefined(
            "the inline if-expression on line evaluated to false and no else section was defined.");
      }
    }
    return jvalue();
  }

  jvalue eval_binop(const expr& e, const frame_ptr& f) {
    const std::string& op = e.name;
    jvalue a = eval(*e.args[0], f);
    if (op == "and") return a.truthy() ? eval(*e.args[1], f) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.args[1], f);
    jvalue b = eval(*e.args[1], f);
    if (op == "~") {
      std::string sa = a.to_str(), sb = b.to_str();
      check_size(sa.size() + sb.size(), limits_.max_bytes);
      return jvalue(sa + sb);
    }
    if (is_comparison(op)) return jvalue(compare_op(op, a, b));
    return arith(op, a, b, limits_.max_bytes);
  }

  static bool is_comparison(const std::string& op) {
    return op == "==" || op == "!=" || op == "in" || op == "not in" || op == "<" || op == ">" ||
           op == "<=" || op == ">=";
  }
  static bool compare_op(const std::string& op, const jvalue& a, const jvalue& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    int c = compare(a, b);
    return op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
  }

  // a op1 b op2 c ...: Python's chained comparison, (a op1 b) and (b op2 c) ..., each operand
  // evaluated once and the chain stopping at the first false link.
  jvalue eval_compare_chain(const expr& e, const frame_ptr& f) {
    jvalue left = eval(*e.args[0], f);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      jvalue right = eval(*e.args[i + 1], f);
      if (!compare_op(e.ops[i], left, right)) return jvalue(false);
      left = std::move(right);
    }
    return jvalue(true);
  }

  std::optional<std::time_t> now_;
  const template_limits& limits_;
  std::size_t depth_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace

std::string evaluate(const body& tree, const json::value& context, std::optional<std::time_t> now,
                     const template_limits& limits) {
  render_arena arena;  // declared first: empties what the render made after the evaluator is gone
  evaluator ev(now, limits);
  return ev.run(tree, context);
}

}  // namespace coserve::jinja
