// small_vector<T, N>: a vector of trivially copyable values that holds up to N of them inside the
// object and moves to the heap beyond that. A step plan's input tokens are one (a decode) to a few
// (speculative proposals) per sequence: inside the plan they cost no allocation.
//
// The subset of std::vector's interface the project uses (construction from a list, a range or a
// std::vector; size, data, indexing, iteration, back; push_back, resize, reserve, assign, insert,
// erase at the end, clear), comparison with another small_vector or a std::vector, and conversion
// to std::span.
//
// Threads: none (a value).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <span>
#include <type_traits>
#include <vector>

namespace coserve {

template <class T, std::size_t N>
class small_vector {
  static_assert(std::is_trivially_copyable_v<T>, "small_vector holds trivially copyable values");
  static_assert(N > 0);

 public:
  using value_type = T;
  using size_type = std::size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reference = T&;
  using const_reference = const T&;

  small_vector() noexcept = default;
  small_vector(std::initializer_list<T> list) { assign(list.begin(), list.end()); }
  small_vector(size_type n, const T& value) { assign(n, value); }
  explicit small_vector(size_type n) { resize(n); }
  template <class It>
  requires std::input_iterator<It> small_vector(It first, It last) { assign(first, last); }
  small_vector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT(implicit)
  small_vector(const small_vector& o) { assign(o.begin(), o.end()); }
  small_vector(small_vector&& o) noexcept { take(o); }
  ~small_vector() { release(); }

  small_vector& operator=(const small_vector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  small_vector& operator=(small_vector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  small_vector& operator=(std::initializer_list<T> list) {
    assign(list.begin(), list.end());
    return *this;
  }
  small_vector& operator=(const std::vector<T>& v) {
    assign(v.begin(), v.end());
    return *this;
  }

  size_type size() const noexcept { return size_; }
  size_type capacity() const noexcept { return heap_ ? capacity_ : N; }
  bool empty() const noexcept { return size_ == 0; }
  T* data() noexcept { return heap_ ? heap_ : inline_; }
  const T* data() const noexcept { return heap_ ? heap_ : inline_; }
  T& operator[](size_type i) noexcept { return data()[i]; }
  const T& operator[](size_type i) const noexcept { return data()[i]; }
  T& front() noexcept { return data()[0]; }
  const T& front() const noexcept { return data()[0]; }
  T& back() noexcept { return data()[size_ - 1]; }
  const T& back() const noexcept { return data()[size_ - 1]; }
  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  const_iterator cbegin() const noexcept { return data(); }
  const_iterator cend() const noexcept { return data() + size_; }
  operator std::span<const T>() const noexcept { return {data(), size_}; }  // NOLINT(implicit)
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

  void reserve(size_type n) {
    if (n <= capacity()) return;
    T* p = static_cast<T*>(::operator new(n * sizeof(T)));
    if (size_) std::memcpy(p, data(), size_ * sizeof(T));
    release();
    heap_ = p;
    capacity_ = n;
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_type n) { resize(n, T{}); }
  void resize(size_type n, const T& value) {
    if (n > capacity()) reserve(std::max(n, 2 * capacity()));
    for (size_type i = size_; i < n; ++i) data()[i] = value;
    size_ = n;
  }
  void push_back(const T& value) {
    if (size_ == capacity()) {
      const T copy = value;  // `value` may live in this vector
      reserve(2 * capacity());
      data()[size_++] = copy;
      return;
    }
    data()[size_++] = value;
  }
  void pop_back() noexcept { --size_; }
  void assign(size_type n, const T& value) {
    size_ = 0;
    resize(n, value);
  }
  template <class It>
  requires std::input_iterator<It>
  void assign(It first, It last) {
    size_ = 0;
    insert(end(), first, last);
  }
  template <class It>
  requires std::input_iterator<It> iterator insert(const_iterator pos, It first, It last) {
    const size_type at = static_cast<size_type>(pos - begin());
    const auto n = static_cast<size_type>(std::distance(first, last));
    if (size_ + n > capacity()) reserve(std::max(size_ + n, 2 * capacity()));
    T* d = data();
    if (at < size_) std::memmove(d + at + n, d + at, (size_ - at) * sizeof(T));
    std::copy(first, last, d + at);
    size_ += n;
    return d + at;
  }
  iterator insert(const_iterator pos, size_type n, const T& value) {
    const T copy = value;
    const size_type at = static_cast<size_type>(pos - begin());
    if (size_ + n > capacity()) reserve(std::max(size_ + n, 2 * capacity()));
    T* d = data();
    if (at < size_) std::memmove(d + at + n, d + at, (size_ - at) * sizeof(T));
    std::fill(d + at, d + at + n, copy);
    size_ += n;
    return d + at;
  }
  iterator insert(const_iterator pos, const T& value) {
    const T copy = value;
    return insert(pos, &copy, &copy + 1);
  }
  iterator erase(const_iterator first, const_iterator last) {
    const size_type at = static_cast<size_type>(first - begin());
    const auto n = static_cast<size_type>(last - first);
    T* d = data();
    std::memmove(d + at, d + at + n, (size_ - at - n) * sizeof(T));
    size_ -= n;
    return d + at;
  }

  friend bool operator==(const small_vector& a, const small_vector& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const small_vector& a, const std::vector<T>& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void release() noexcept {
    if (heap_) ::operator delete(heap_);
    heap_ = nullptr;
    capacity_ = 0;
  }
  void take(small_vector& o) noexcept {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      capacity_ = o.capacity_;
      o.heap_ = nullptr;
      o.capacity_ = 0;
    } else {
      std::memcpy(inline_, o.inline_, size_ * sizeof(T));
    }
    o.size_ = 0;
  }

  T* heap_ = nullptr;  // the values when more than N (null: inline_)
  size_type size_ = 0;
  size_type capacity_ = 0;  // of heap_
  T inline_[N];
};

}  // namespace coserve
