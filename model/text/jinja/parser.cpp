// Lexer and recursive-descent parser for the Jinja subset chat templates use. Kept in one file
// (over 500 lines) because the tag scanner, the expression tokenizer and the grammar share the
// token stream and error reporting; splitting them would spread one grammar over three files.
#include "model/text/jinja/parser.hpp"

#include <cctype>
#include <set>

namespace coserve::jinja {
namespace {

// ---- template chunks ------------------------------------------------------------------------

struct chunk {
  enum class kind { text, var, block } k;
  std::string content;
  int line = 1;
};

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Splits the source into text and tags, applying the whitespace rules: `{%-`/`-%}` strip all
// whitespace on that side; lstrip_blocks removes spaces/tabs before a block or comment tag that
// starts its line (unless `{%+`); trim_blocks removes one newline after a block or comment tag
// (unless `+%}`). One scanner per source; scan() runs it once.
class template_scanner {
 public:
  explicit template_scanner(std::string_view src) : src_(src) {}

  std::vector<chunk> scan() {
    while (pos_ <= src_.size()) {
      const size_t open = find_tag_open();
      const size_t text_begin = text_start(open);
      const size_t text_end = open == std::string_view::npos ? src_.size() : open;
      std::string text(src_.substr(text_begin, text_end - text_begin));
      const int text_line = line_;
      count_lines(pos_, text_end);
      if (open == std::string_view::npos) {
        if (!text.empty()) out_.push_back({chunk::kind::text, std::move(text), text_line});
        break;
      }
      const char kind_ch = src_[open + 1];
      size_t inner = open + 2;
      const char lmod = inner < src_.size() ? src_[inner] : 0;
      strip_before_tag(text, text_begin, kind_ch, lmod);
      if (!text.empty()) out_.push_back({chunk::kind::text, std::move(text), text_line});
      if (lmod == '-' || lmod == '+') ++inner;
      const size_t end = find_tag_close(kind_ch, inner);
      if (end == std::string_view::npos) {
        out_.push_back({chunk::kind::block, std::string("\x01unclosed"), line_});
        break;
      }
      if (!take_tag(open, inner, end, kind_ch)) break;
    }
    return std::move(out_);
  }

 private:
  std::string_view src_;
  std::vector<chunk> out_;
  size_t pos_ = 0;
  bool strip_next_ = false;  // previous tag ended with '-'
  bool trim_next_ = false;   // previous tag was a block/comment (trim_blocks)
  int line_ = 1;

  void count_lines(size_t a, size_t b) {
    for (size_t i = a; i < b; ++i) line_ += src_[i] == '\n';
  }

  // The '{' of the next `{{`, `{%` or `{#` from pos_; npos when none.
  size_t find_tag_open() const {
    size_t open = src_.find('{', pos_);
    while (open != std::string_view::npos && open + 1 < src_.size() && src_[open + 1] != '{' &&
           src_[open + 1] != '%' && src_[open + 1] != '#')
      open = src_.find('{', open + 1);
    if (open != std::string_view::npos && open + 1 >= src_.size()) open = std::string_view::npos;
    return open;
  }

  // Where the text before the tag at `open` starts once the previous tag's `-%}` (all whitespace)
  // or trim_blocks (one newline) has taken its share.
  size_t text_start(size_t open) const {
    const size_t text_end = open == std::string_view::npos ? src_.size() : open;
    size_t text_begin = pos_;
    if (strip_next_) {
      while (text_begin < text_end && is_ws(src_[text_begin])) ++text_begin;
    } else if (trim_next_ && text_begin < text_end && src_[text_begin] == '\n') {
      ++text_begin;
    } else if (trim_next_ && text_begin + 1 < text_end && src_[text_begin] == '\r' &&
               src_[text_begin + 1] == '\n') {
      text_begin += 2;
    }
    return text_begin;
  }

  // The end of `text` as the tag after it asks: `{%-` strips all whitespace, lstrip_blocks the
  // spaces and tabs of a block or comment tag that starts its line (unless `{%+`).
  void strip_before_tag(std::string& text, size_t text_begin, char kind_ch, char lmod) const {
    if (lmod == '-') {
      while (!text.empty() && is_ws(text.back())) text.pop_back();
    } else if (lmod != '+' && kind_ch != '{') {
      // lstrip_blocks: only when nothing but spaces/tabs precede the tag on its line.
      size_t nl = text.rfind('\n');
      bool line_start = nl != std::string::npos || text_begin == 0 || src_[text_begin - 1] == '\n';
      size_t from = nl == std::string::npos ? 0 : nl + 1;
      if (line_start && text.find_first_not_of(" \t", from) == std::string::npos) text.resize(from);
    }
  }

  // The closing delimiter of a tag whose content starts at `inner`, skipping string literals
  // inside var/block tags; npos when the tag is not closed.
  size_t find_tag_close(char kind_ch, size_t inner) const {
    std::string_view close = kind_ch == '{' ? "}}" : kind_ch == '%' ? "%}" : "#}";
    size_t i = inner;
    char quote = 0;
    int depth = 0;
    while (i + 1 < src_.size() + 1 && i < src_.size()) {
      char c = src_[i];
      if (kind_ch != '#' && quote) {
        if (c == '\\') {
          i += 2;
          continue;
        }
        if (c == quote) quote = 0;
        ++i;
        continue;
      }
      if (kind_ch != '#' && (c == '\'' || c == '"')) {
        quote = c;
        ++i;
        continue;
      }
      // As jinja2's lexer: the closing delimiter counts only outside brackets, so `}}` closing
      // nested dict literals inside `{{ ... }}` does not end the tag.
      if (depth == 0 && src_.compare(i, 2, close) == 0) return i;
      if (kind_ch != '#') {
        if (c == '(' || c == '[' || c == '{')
          ++depth;
        else if ((c == ')' || c == ']' || c == '}') && depth > 0)
          --depth;
      }
      ++i;
    }
    return std::string_view::npos;
  }

  // The tag from `open` to its closing delimiter at `end`: a var or block chunk (comments give
  // none), or a raw section; false when scanning ends (a raw section without endraw).
  bool take_tag(size_t open, size_t inner, size_t end, char kind_ch) {
    size_t content_end = end;
    const char rmod = end > inner ? src_[end - 1] : 0;
    if (rmod == '-' || rmod == '+') --content_end;
    std::string_view content = src_.substr(inner, content_end - inner);
    while (!content.empty() && is_ws(content.front())) content.remove_prefix(1);
    while (!content.empty() && is_ws(content.back())) content.remove_suffix(1);
    if (kind_ch == '%' && content == "raw") return take_raw(open, end, rmod);
    if (kind_ch != '#') {
      out_.push_back({kind_ch == '{' ? chunk::kind::var : chunk::kind::block,
                      std::string(src_.substr(inner, content_end - inner)), line_});
    }
    count_lines(open, end + 2);
    pos_ = end + 2;
    strip_next_ = rmod == '-';
    trim_next_ = kind_ch != '{' && rmod != '+';
    return true;
  }

  // {% raw %}...{% endraw %}: the text between is output as it is. As jinja2's lexer: `-%}` after
  // raw strips the whitespace that follows it, `{%-` before endraw the whitespace that precedes
  // it, and endraw's own end follows the usual rules. `end`: where raw's `%}` starts.
  bool take_raw(size_t open, size_t end, char rmod) {
    count_lines(open, end + 2);
    size_t body = end + 2;
    if (rmod == '-')
      while (body < src_.size() && is_ws(src_[body])) ++body;
    size_t e = body, tag_end = std::string_view::npos;
    char end_lmod = 0, end_rmod = 0;
    for (; (e = src_.find("{%", e)) != std::string_view::npos; ++e) {
      size_t k = e + 2;
      end_lmod = k < src_.size() && (src_[k] == '-' || src_[k] == '+') ? src_[k++] : 0;
      while (k < src_.size() && is_ws(src_[k])) ++k;
      if (src_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      while (k < src_.size() && is_ws(src_[k])) ++k;
      end_rmod = k < src_.size() && (src_[k] == '-' || src_[k] == '+') ? src_[k++] : 0;
      if (src_.compare(k, 2, "%}") != 0) continue;
      tag_end = k + 2;
      break;
    }
    if (tag_end == std::string_view::npos) {
      out_.push_back({chunk::kind::block, std::string("\x01unclosed"), line_});  // no endraw
      return false;
    }
    std::string raw(src_.substr(body, e - body));
    if (end_lmod == '-') {
      while (!raw.empty() && is_ws(raw.back())) raw.pop_back();
    } else if (end_lmod != '+') {  // lstrip_blocks: spaces and tabs before endraw at a line's start
      size_t from = raw.find_last_not_of(" \t");
      if (from == std::string::npos ? e == body || src_[body - 1] == '\n' : raw[from] == '\n')
        raw.resize(from == std::string::npos ? 0 : from + 1);
    }
    if (!raw.empty()) out_.push_back({chunk::kind::text, std::move(raw), line_});
    count_lines(end + 2, tag_end);
    pos_ = tag_end;
    strip_next_ = end_rmod == '-';
    trim_next_ = end_rmod != '+';
    return true;
  }
};

std::vector<chunk> scan(std::string_view src) { return template_scanner(src).scan(); }

// ---- expression tokens ----------------------------------------------------------------------

struct token {
  enum class kind { name, str, integer, floating, op, end } k;
  std::string s;
  int64_t i = 0;
  double d = 0;
};

std::vector<token> tokenize(std::string_view s) {
  std::vector<token> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (is_ws(c)) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({token::kind::name, std::string(s.substr(i, j - i))});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          is_float = true;
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      std::string num;
      for (char ch : s.substr(i, j - i))
        if (ch != '_') num += ch;
      token t{is_float ? token::kind::floating : token::kind::integer, num};
      if (is_float)
        t.d = std::stod(num);
      else
        t.i = std::stoll(num);
      out.push_back(std::move(t));
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      while (j < s.size() && s[j] != c) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          char e = s[j + 1];
          switch (e) {
            case 'n':
              v += '\n';
              break;
            case 't':
              v += '\t';
              break;
            case 'r':
              v += '\r';
              break;
            case '\\':
              v += '\\';
              break;
            case '\'':
              v += '\'';
              break;
            case '"':
              v += '"';
              break;
            default:
              v += '\\';
              v += e;
          }
          j += 2;
          continue;
        }
        v += s[j++];
      }
      if (j >= s.size()) throw template_error("unexpected end of string");
      out.push_back({token::kind::str, std::move(v)});
      i = j + 1;
      continue;
    }
    static constexpr std::string_view two[] = {"**", "//", "==", "!=", "<=", ">="};
    bool matched = false;
    for (auto op : two) {
      if (s.compare(i, 2, op) == 0) {
        out.push_back({token::kind::op, std::string(op)});
        i += 2;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (std::string_view("+-*/%~()[]{}.,:|=<>!").find(c) == std::string_view::npos)
      throw template_error(std::string("unexpected char '") + c + "'");
    out.push_back({token::kind::op, std::string(1, c)});
    ++i;
  }
  out.push_back({token::kind::end, ""});
  return out;
}

// ---- parser ---------------------------------------------------------------------------------

class parser {
 public:
  explicit parser(std::vector<chunk> chunks) : chunks_(std::move(chunks)) {}

  body parse_all() {
    std::string stop;
    body b = parse_body({}, stop);
    if (!stop.empty()) fail("Encountered unknown tag '" + stop + "'.");
    return b;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw template_error(msg + " (line " + std::to_string(line_) + ")");
  }

  // One level of block or expression nesting while it lives; a deeper template is a syntax error
  // rather than a parser recursion that exhausts the stack.
  static constexpr int k_max_nesting = 100;
  struct nest {
    explicit nest(parser& p) : ps(p) {
      if (p.depth_ >= k_max_nesting)
        p.fail("template nested deeper than " + std::to_string(k_max_nesting) + " levels");
      ++p.depth_;
    }
    ~nest() { --ps.depth_; }
    nest(const nest&) = delete;
    nest& operator=(const nest&) = delete;
    parser& ps;
  };

  // Parses nodes until a block tag whose keyword is in `ends`; that keyword goes to `stop` and the
  // tag's remaining tokens stay current for the caller.
  body parse_body(const std::set<std::string>& ends, std::string& stop) {
    body out;
    while (ci_ < chunks_.size()) {
      const chunk& c = chunks_[ci_++];
      line_ = c.line;
      if (c.k == chunk::kind::text) {
        auto n = std::make_unique<node>();
        n->k = node::kind::text;
        n->text = c.content;
        out.push_back(std::move(n));
        continue;
      }
      if (c.content == "\x01unclosed") fail("unexpected end of template, tag not closed");
      toks_ = tokenize(c.content);
      ti_ = 0;
      if (c.k == chunk::kind::var) {
        auto n = std::make_unique<node>();
        n->k = node::kind::output;
        n->e = parse_expr();
        expect_end();
        out.push_back(std::move(n));
        continue;
      }
      if (peek().k != token::kind::name) fail("tag name expected");
      std::string kw = next().s;
      if (ends.count(kw)) {
        stop = kw;
        return out;
      }
      out.push_back(parse_statement(kw));
    }
    if (!ends.empty()) fail("Unexpected end of template. Jinja was looking for a closing tag.");
    return out;
  }

  body parse_until(const std::set<std::string>& ends, std::string& stop) {
    body b = parse_body(ends, stop);
    if (stop.empty()) fail("missing end tag");
    return b;
  }

  node_ptr parse_statement(const std::string& kw) {
    nest guard(*this);
    auto n = std::make_unique<node>();
    std::string stop;
    if (kw == "if") {
      n->k = node::kind::if_;
      // jinja2 parses if/elif tests without a conditional expression (`if a if b else c` is an
      // error).
      expr_ptr cond = parse_or_test_no_cond();
      expect_end();
      while (true) {
        body b = parse_until({"elif", "else", "endif"}, stop);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (stop == "elif") {
          cond = parse_or_test_no_cond();
          expect_end();
        } else if (stop == "else") {
          expect_end();
          body e = parse_until({"endif"}, stop);
          expect_end();
          n->branches.emplace_back(nullptr, std::move(e));
          break;
        } else {
          expect_end();
          break;
        }
      }
    } else if (kw == "for") {
      n->k = node::kind::for_;
      do {
        if (peek().k != token::kind::name) fail("loop variable expected");
        n->targets.push_back(next().s);
      } while (accept_op(","));
      if (!accept_name("in")) fail("expected 'in'");
      n->e = parse_or_test_no_cond();
      if (accept_name("if")) n->cond = parse_expr();  // the filter may be a conditional expression
      if (accept_name("recursive")) n->recursive = true;
      expect_end();
      n->children = parse_until({"else", "endfor"}, stop);
      expect_end();
      if (stop == "else") {
        n->else_children = parse_until({"endfor"}, stop);
        expect_end();
      }
    } else if (kw == "set") {
      if (peek().k != token::kind::name) fail("set target expected");
      std::string first = next().s;
      n->targets.push_back(first);
      if (accept_op(".")) {
        n->attr_target = true;
        n->targets.push_back(next().s);
      } else {
        while (accept_op(",")) n->targets.push_back(next().s);
      }
      if (accept_op("=")) {
        n->k = node::kind::set;
        n->e = parse_tuple_expr();
        expect_end();
      } else {
        n->k = node::kind::set_block;
        if (accept_op("|")) n->e = parse_filter_chain(nullptr);
        expect_end();
        n->children = parse_until({"endset"}, stop);
        expect_end();
      }
    } else if (kw == "macro") {
      n->k = node::kind::macro;
      n->text = next().s;
      parse_params(n->params);
      expect_end();
      n->children = parse_until({"endmacro"}, stop);
      if (peek().k == token::kind::name) next();
      expect_end();
    } else if (kw == "call") {
      n->k = node::kind::call_block;
      if (peek().k == token::kind::op && peek().s == "(") parse_params(n->params);
      n->e = parse_expr();
      expect_end();
      n->children = parse_until({"endcall"}, stop);
      expect_end();
    } else if (kw == "filter") {
      n->k = node::kind::filter_block;
      n->e = parse_filter_chain(nullptr);
      expect_end();
      n->children = parse_until({"endfilter"}, stop);
      expect_end();
    } else if (kw ==
               "with") {  // {% with a = 1, b = x %}...{% endwith %}: names scoped to the block
      n->k = node::kind::with;
      while (peek().k == token::kind::name) {
        std::string name = next().s;
        if (!accept_op("=")) fail("expected '=' after '" + name + "' in with");
        n->params.emplace_back(std::move(name), parse_expr());
        if (!accept_op(",")) break;
      }
      expect_end();
      n->children = parse_until({"endwith"}, stop);
      expect_end();
    } else if (kw == "generation") {
      n->k = node::kind::generation;
      expect_end();
      n->children = parse_until({"endgeneration"}, stop);
      expect_end();
    } else if (kw == "break" || kw == "continue") {
      n->k = kw == "break" ? node::kind::break_ : node::kind::continue_;
      expect_end();
    } else {
      fail("Encountered unknown tag '" + kw + "'.");
    }
    return n;
  }

  void parse_params(std::vector<std::pair<std::string, expr_ptr>>& params) {
    expect_op("(");
    while (!accept_op(")")) {
      if (!params.empty()) expect_op(",");
      if (accept_op(")")) break;
      std::string name = next().s;
      expr_ptr def;
      if (accept_op("=")) def = parse_expr();
      params.emplace_back(std::move(name), std::move(def));
    }
  }

  // -- token helpers --
  const token& peek(size_t ahead = 0) const {
    size_t i = ti_ + ahead;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  const token& next() {
    const token& t = peek();
    if (ti_ < toks_.size() - 1) ++ti_;
    return t;
  }
  bool accept_op(std::string_view op) {
    if (peek().k == token::kind::op && peek().s == op) {
      next();
      return true;
    }
    return false;
  }
  bool accept_name(std::string_view n) {
    if (peek().k == token::kind::name && peek().s == n) {
      next();
      return true;
    }
    return false;
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail("expected '" + std::string(op) + "', got '" + peek().s + "'");
  }
  void expect_end() {
    if (peek().k != token::kind::end) fail("expected end of statement, got '" + peek().s + "'");
  }

  static expr_ptr make(expr::kind k, std::string name = {}) {
    auto e = std::make_unique<expr>();
    e->k = k;
    e->name = std::move(name);
    return e;
  }
  static expr_ptr binop(std::string op, expr_ptr a, expr_ptr b) {
    auto e = make(expr::kind::binop, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // -- grammar (jinja2 precedence) --
  expr_ptr parse_tuple_expr() {
    expr_ptr first = parse_expr();
    if (!(peek().k == token::kind::op && peek().s == ",")) return first;
    auto t = make(expr::kind::tuple);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().k == token::kind::end) break;
      t->args.push_back(parse_expr());
    }
    return t;
  }

  expr_ptr parse_expr() {
    nest guard(*this);
    expr_ptr e = parse_or();
    while (accept_name("if")) {
      auto c = make(expr::kind::cond);
      expr_ptr cond = parse_or();
      expr_ptr other;
      if (accept_name("else")) other = parse_expr();
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }
  expr_ptr parse_or_test_no_cond() { return parse_or(); }

  expr_ptr parse_or() {
    expr_ptr e = parse_and();
    while (accept_name("or")) e = binop("or", std::move(e), parse_and());
    return e;
  }
  expr_ptr parse_and() {
    expr_ptr e = parse_not();
    while (accept_name("and")) e = binop("and", std::move(e), parse_not());
    return e;
  }
  expr_ptr parse_not() {
    if (accept_name("not")) {
      nest guard(*this);
      auto e = make(expr::kind::unop, "not");
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  // One comparison is a binop; two or more chain as in Python (a < b < c), a compare node.
  expr_ptr parse_compare() {
    expr_ptr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<expr_ptr> operands;
    while (true) {
      const token& t = peek();
      std::string op;
      if (t.k == token::kind::op &&
          (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == ">" || t.s == "<=" || t.s == ">=")) {
        op = next().s;
      } else if (t.k == token::kind::name && t.s == "in") {
        next();
        op = "in";
      } else if (t.k == token::kind::name && t.s == "not" && peek(1).k == token::kind::name &&
                 peek(1).s == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      ops.push_back(std::move(op));
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    if (ops.size() == 1) return binop(ops[0], std::move(first), std::move(operands[0]));
    auto c = make(expr::kind::compare);
    c->args.push_back(std::move(first));
    for (auto& o : operands) c->args.push_back(std::move(o));
    c->ops = std::move(ops);
    return c;
  }
  expr_ptr parse_math1() {
    expr_ptr e = parse_concat();
    while (peek().k == token::kind::op && (peek().s == "+" || peek().s == "-")) {
      std::string op = next().s;
      e = binop(op, std::move(e), parse_concat());
    }
    return e;
  }
  expr_ptr parse_concat() {
    expr_ptr e = parse_math2();
    while (accept_op("~")) e = binop("~", std::move(e), parse_math2());
    return e;
  }
  expr_ptr parse_math2() {
    expr_ptr e = parse_pow();
    while (peek().k == token::kind::op &&
           (peek().s == "*" || peek().s == "/" || peek().s == "//" || peek().s == "%")) {
      std::string op = next().s;
      e = binop(op, std::move(e), parse_pow());
    }
    return e;
  }
  expr_ptr parse_pow() {
    expr_ptr e = parse_unary(true);
    while (accept_op("**")) e = binop("**", std::move(e), parse_unary(true));
    return e;
  }
  expr_ptr parse_unary(bool with_filter) {
    expr_ptr e;
    if (peek().k == token::kind::op && (peek().s == "-" || peek().s == "+")) {
      nest guard(*this);
      std::string op = next().s;
      e = make(expr::kind::unop, op);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  expr_ptr parse_primary() {
    const token t = next();
    switch (t.k) {
      case token::kind::str: {
        std::string s = t.s;
        while (peek().k == token::kind::str) s += next().s;  // adjacent literals concatenate
        auto e = make(expr::kind::literal);
        e->lit = jvalue(std::move(s));
        return e;
      }
      case token::kind::integer: {
        auto e = make(expr::kind::literal);
        e->lit = jvalue(t.i);
        return e;
      }
      case token::kind::floating: {
        auto e = make(expr::kind::literal);
        e->lit = jvalue(t.d);
        return e;
      }
      case token::kind::name: {
        auto e = make(expr::kind::literal);
        if (t.s == "true" || t.s == "True")
          e->lit = jvalue(true);
        else if (t.s == "false" || t.s == "False")
          e->lit = jvalue(false);
        else if (t.s == "none" || t.s == "None")
          e->lit = jvalue();
        else
          return make(expr::kind::name, t.s);
        return e;
      }
      case token::kind::op: {
        if (t.s == "(") {
          if (accept_op(")")) return make(expr::kind::tuple);
          expr_ptr first = parse_expr();
          if (accept_op(")")) return first;
          auto tup = make(expr::kind::tuple);
          tup->args.push_back(std::move(first));
          while (accept_op(",")) {
            if (peek().k == token::kind::op && peek().s == ")") break;
            tup->args.push_back(parse_expr());
          }
          expect_op(")");
          return tup;
        }
        if (t.s == "[") {
          auto l = make(expr::kind::list);
          while (!accept_op("]")) {
            if (!l->args.empty()) expect_op(",");
            if (accept_op("]")) break;
            l->args.push_back(parse_expr());
          }
          return l;
        }
        if (t.s == "{") {
          auto d = make(expr::kind::dict);
          while (!accept_op("}")) {
            if (!d->args.empty()) expect_op(",");
            if (accept_op("}")) break;
            d->args.push_back(parse_expr());
            expect_op(":");
            d->args.push_back(parse_expr());
          }
          return d;
        }
        break;
      }
      case token::kind::end:
        fail("unexpected end of expression");
    }
    fail("unexpected '" + t.s + "'");
  }

  void parse_call_args(expr& call) {
    // '(' already consumed
    bool first = true;
    while (!accept_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (accept_op(")")) break;
      if (peek().k == token::kind::name && peek(1).k == token::kind::op && peek(1).s == "=") {
        std::string key = next().s;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        call.args.push_back(parse_expr());
      }
    }
  }

  expr_ptr parse_postfix(expr_ptr e) {
    while (true) {
      if (accept_op(".")) {
        const token& t = next();
        auto a = make(expr::kind::attr, t.k == token::kind::integer ? std::to_string(t.i) : t.s);
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (accept_op("[")) {
        expr_ptr start, stop, step;
        bool is_slice = false;
        if (!(peek().k == token::kind::op && peek().s == ":")) start = parse_expr();
        if (accept_op(":")) {
          is_slice = true;
          if (!(peek().k == token::kind::op && (peek().s == ":" || peek().s == "]")))
            stop = parse_expr();
          if (accept_op(":") && !(peek().k == token::kind::op && peek().s == "]"))
            step = parse_expr();
        }
        expect_op("]");
        if (is_slice) {
          auto s = make(expr::kind::slice);
          s->args.push_back(std::move(e));
          s->args.push_back(std::move(start));
          s->args.push_back(std::move(stop));
          s->args.push_back(std::move(step));
          e = std::move(s);
        } else {
          auto s = make(expr::kind::index);
          s->args.push_back(std::move(e));
          s->args.push_back(std::move(start));
          e = std::move(s);
        }
      } else if (accept_op("(")) {
        auto c = make(expr::kind::call);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  expr_ptr parse_filter_chain(expr_ptr subject) {
    // After '|' (or at the start of a filter block): name [args] ('|' name [args])*
    do {
      std::string name = next().s;
      while (accept_op(".")) name += "." + next().s;

      auto f = make(expr::kind::filter, name);
      f->args.push_back(std::move(subject));
      if (accept_op("(")) parse_call_args(*f);
      subject = std::move(f);
    } while (accept_op("|"));
    return subject;
  }

  expr_ptr parse_filter_expr(expr_ptr e) {
    while (true) {
      if (accept_op("|")) {
        std::string name = next().s;

        auto f = make(expr::kind::filter, name);
        f->args.push_back(std::move(e));
        if (accept_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        bool neg = accept_name("not");
        const token& t = next();
        std::string name = t.s;
        if (name.empty() && t.k != token::kind::name) fail("test name expected");
        auto te = make(expr::kind::test, name);
        te->negate = neg;
        te->args.push_back(std::move(e));
        if (accept_op("(")) {
          parse_call_args(*te);
        } else if ((peek().k == token::kind::op && peek().s == "[") ||
                   peek().k == token::kind::str || peek().k == token::kind::integer ||
                   peek().k == token::kind::floating ||
                   (peek().k == token::kind::name && peek().s != "and" && peek().s != "or" &&
                    peek().s != "if" && peek().s != "else" && peek().s != "in" &&
                    peek().s != "is" && peek().s != "not")) {
          te->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(te);
      } else if (accept_op("(")) {
        auto c = make(expr::kind::call);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  std::vector<chunk> chunks_;
  size_t ci_ = 0;
  std::vector<token> toks_;
  size_t ti_ = 0;
  int line_ = 1;
  int depth_ = 0;
};

}  // namespace

result<body> parse_template(std::string_view source) {
  // jinja2 drops one trailing newline of the source (keep_trailing_newline=False).
  if (source.ends_with("\r\n"))
    source.remove_suffix(2);
  else if (source.ends_with("\n") || source.ends_with("\r"))
    source.remove_suffix(1);
  try {
    parser p(scan(source));
    return p.parse_all();
  } catch (const template_error& e) {
    return make_error("template_syntax", e.what());
  } catch (const std::exception& e) {
    return make_error("template_syntax", e.what());
  }
}

}  // namespace coserve::jinja
