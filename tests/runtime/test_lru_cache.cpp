#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/lru_cache.hpp"

using coserve::rt::lru_cache;

namespace {

// A value that records its own destruction (moved-from instances record nothing).
struct tracked {
  int id = -1;
  std::vector<int>* destroyed = nullptr;
  tracked(int i, std::vector<int>* log) : id(i), destroyed(log) {}
  tracked(tracked&& o) noexcept : id(o.id), destroyed(std::exchange(o.destroyed, nullptr)) {}
  tracked& operator=(tracked&& o) noexcept {
    if (this != &o) {
      if (destroyed) destroyed->push_back(id);
      id = o.id;
      destroyed = std::exchange(o.destroyed, nullptr);
    }
    return *this;
  }
  tracked(const tracked&) = delete;
  tracked& operator=(const tracked&) = delete;
  ~tracked() {
    if (destroyed) destroyed->push_back(id);
  }
};

std::vector<int> present(const lru_cache<int, int>& c, int upto) {
  std::vector<int> keys;
  for (int k = 0; k <= upto; ++k)
    if (c.contains(k)) keys.push_back(k);
  return keys;
}

}  // namespace

TEST_CASE("lru_cache evicts the least recently inserted key first", "[lru]") {
  lru_cache<int, int> c(3);
  CHECK(c.capacity() == 3);
  CHECK(c.empty());
  for (int k = 1; k <= 3; ++k) c.insert(k, k * 10);
  CHECK(c.size() == 3);
  CHECK(present(c, 9) == std::vector<int>{1, 2, 3});
  c.insert(4, 40);
  CHECK(c.size() == 3);
  CHECK(present(c, 9) == std::vector<int>{2, 3, 4});
  c.insert(5, 50);
  CHECK(present(c, 9) == std::vector<int>{3, 4, 5});
  CHECK(c.find(1) == nullptr);
  REQUIRE(c.find(5) != nullptr);
  CHECK(*c.find(5) == 50);
}

TEST_CASE("lru_cache: pop_least_recent hands out entries oldest first", "[lru]") {
  lru_cache<int, int> c(4);
  for (int k = 1; k <= 3; ++k) c.insert(k, k * 10);
  REQUIRE(c.find(1) != nullptr);  // 1 is now the most recent: 2, 3, 1
  auto a = c.pop_least_recent();
  REQUIRE(a.has_value());
  CHECK((a->first == 2 && a->second == 20));
  CHECK(c.size() == 2);
  CHECK(c.find(2) == nullptr);
  CHECK(c.pop_least_recent()->first == 3);
  CHECK(c.pop_least_recent()->first == 1);
  CHECK_FALSE(c.pop_least_recent().has_value());
  CHECK(c.empty());
}

TEST_CASE("lru_cache: a hit makes its key the most recently used", "[lru]") {
  lru_cache<int, int> c(3);
  for (int k = 1; k <= 3; ++k) c.insert(k, k);
  REQUIRE(c.find(1) != nullptr);  // order now 1, 3, 2 (most recent first)
  c.insert(4, 4);                 // evicts 2, not 1
  CHECK(present(c, 9) == std::vector<int>{1, 3, 4});
  c.insert(3, 33);  // an existing key: value replaced, made most recent, nothing evicted
  CHECK(c.size() == 3);
  CHECK(*c.find(3) == 33);
  c.insert(5, 5);  // order was 3, 4, 1: evicts 1
  CHECK(present(c, 9) == std::vector<int>{3, 4, 5});
  // contains() looks without touching the order: 4 is still the least recent.
  CHECK(c.contains(4));
  c.insert(6, 6);
  CHECK(present(c, 9) == std::vector<int>{3, 5, 6});
}

TEST_CASE("lru_cache destroys evicted, replaced and erased values when it drops them", "[lru]") {
  std::vector<int> destroyed;
  {
    lru_cache<int, tracked> c(2);
    c.insert(1, tracked(1, &destroyed));
    c.insert(2, tracked(2, &destroyed));
    CHECK(destroyed.empty());
    c.insert(3, tracked(3, &destroyed));
    CHECK(destroyed == std::vector<int>{1});  // evicted at once
    c.find(2);
    c.insert(4, tracked(4, &destroyed));
    CHECK(destroyed == std::vector<int>{1, 3});
    c.insert(2, tracked(20, &destroyed));  // replaces the value of key 2
    CHECK(destroyed == std::vector<int>{1, 3, 2});
    CHECK(c.find(2)->id == 20);
    CHECK(c.erase(4));
    CHECK_FALSE(c.erase(4));
    CHECK(destroyed == std::vector<int>{1, 3, 2, 4});
    CHECK(c.size() == 1);
  }
  CHECK(destroyed == std::vector<int>{1, 3, 2, 4, 20});  // the rest goes with the cache

  // unique_ptr values with a deleter: the evicted object itself is deleted.
  std::vector<int> deleted;
  struct del {
    std::vector<int>* log;
    void operator()(int* p) const {
      log->push_back(*p);
      delete p;
    }
  };
  lru_cache<int, std::unique_ptr<int, del>> c(1);
  c.insert(7, std::unique_ptr<int, del>(new int(7), del{&deleted}));
  c.insert(8, std::unique_ptr<int, del>(new int(8), del{&deleted}));
  CHECK(deleted == std::vector<int>{7});
  c.clear();
  CHECK(deleted == std::vector<int>{7, 8});
  CHECK(c.empty());
}

TEST_CASE("lru_cache with capacity 1 keeps only the last key, capacity 0 acts as 1", "[lru]") {
  for (size_t cap : {size_t(1), size_t(0)}) {
    CAPTURE(cap);
    lru_cache<std::string, int> c(cap);
    CHECK(c.capacity() == 1);
    c.insert("a", 1);
    REQUIRE(c.find("a") != nullptr);
    CHECK(*c.find("a") == 1);
    c.insert("b", 2);
    CHECK(c.size() == 1);
    CHECK(c.find("a") == nullptr);
    REQUIRE(c.find("b") != nullptr);
    CHECK(*c.find("b") == 2);
    c.insert("b", 3);  // same key: replaced, not evicted
    CHECK(c.size() == 1);
    CHECK(*c.find("b") == 3);
  }
}

TEST_CASE("lru_cache: a moved cache keeps its entries and order, the source is left empty",
          "[lru]") {
  lru_cache<int, int> a(3);
  for (int k = 1; k <= 3; ++k) a.insert(k, k);
  a.find(1);  // order 1, 3, 2
  lru_cache<int, int> b(std::move(a));
  CHECK(a.empty());  // the source is left empty
  b.insert(4, 4);
  CHECK(present(b, 9) == std::vector<int>{1, 3, 4});
  lru_cache<int, int> d(1);
  d = std::move(b);
  CHECK(b.empty());
  CHECK(d.capacity() == 3);
  d.find(3);  // order 3, 4, 1
  d.insert(5, 5);
  CHECK(present(d, 9) == std::vector<int>{3, 4, 5});
  a.insert(9, 9);  // the moved-from cache is usable
  CHECK(a.contains(9));
}

TEST_CASE("lru_cache agrees with a linear reference model on random operations", "[lru]") {
  std::mt19937 rng(12345);
  for (size_t cap : {size_t(1), size_t(2), size_t(5), size_t(16)}) {
    CAPTURE(cap);
    lru_cache<int, int> c(cap);
    std::vector<std::pair<int, int>> model;  // front: most recent
    for (int op = 0; op < 5000; ++op) {
      const int key = int(rng() % 24);
      const auto pos =
          std::find_if(model.begin(), model.end(), [&](auto& e) { return e.first == key; });
      switch (rng() % 3) {
        case 0: {  // find
          int* v = c.find(key);
          REQUIRE((v != nullptr) == (pos != model.end()));
          if (pos != model.end()) {
            REQUIRE(*v == pos->second);
            auto e = *pos;
            model.erase(pos);
            model.insert(model.begin(), e);
          }
          break;
        }
        case 1: {  // insert
          const int value = int(rng());
          REQUIRE(c.insert(key, value) == value);
          if (pos != model.end()) model.erase(pos);
          model.insert(model.begin(), {key, value});
          if (model.size() > cap) model.pop_back();
          break;
        }
        default:  // erase
          REQUIRE(c.erase(key) == (pos != model.end()));
          if (pos != model.end()) model.erase(pos);
      }
      REQUIRE(c.size() == model.size());
      for (int k = 0; k < 24; ++k) {
        const bool in_model =
            std::any_of(model.begin(), model.end(), [&](auto& e) { return e.first == k; });
        REQUIRE(c.contains(k) == in_model);
      }
    }
  }
}
