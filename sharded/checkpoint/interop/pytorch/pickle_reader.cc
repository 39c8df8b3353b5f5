// The restricted pickle machine: one case per opcode, each building at most
// one compact record (PickleGraph). Nothing here imports, calls or
// instantiates anything.
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"

#include <cstring>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sharded/dtype_table.h"

namespace shardlight::sharded::checkpoint::pytorch {
namespace {

// Opcodes, as the pickle protocols (0-5) number them.
enum : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kFloat = 'F', kInt = 'I', kBinInt = 'J',
  kBinInt1 = 'K', kLong = 'L', kBinInt2 = 'M', kNone = 'N', kPersId = 'P', kBinPersId = 'Q', kReduce = 'R',
  kString = 'S', kBinString = 'T', kShortBinString = 'U', kUnicode = 'V', kBinUnicode = 'X', kAppend = 'a',
  kBuild = 'b', kGlobal = 'c', kDict = 'd', kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h',
  kInst = 'i', kLongBinGet = 'j', kList = 'l', kEmptyList = ']', kObj = 'o', kPut = 'p', kBinPut = 'q',
  kLongBinPut = 'r', kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G',
  kProto = 0x80, kNewObj = 0x81, kExt1 = 0x82, kExt2 = 0x83, kExt4 = 0x84, kTuple1 = 0x85, kTuple2 = 0x86,
  kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a, kLong4 = 0x8b, kBinBytes = 'B',
  kShortBinBytes = 'C', kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e, kEmptySet = 0x8f,
  kAddItems = 0x90, kFrozenSet = 0x91, kNewObjEx = 0x92, kStackGlobal = 0x93, kMemoize = 0x94, kFrame = 0x95,
  kByteArray8 = 0x96, kNextBuffer = 0x97, kReadonlyBuffer = 0x98,
};

constexpr char kBigInt[] = "builtins.int (wider than 64 bits)";

// torch.save's class for the storage of a dtype without a legacy class
// (float8, uint16..64, complex32): the storage is bytes, numel counts bytes,
// and _rebuild_tensor_v3 names the tensor's dtype.
constexpr char kUntypedStorage[] = "torch.storage.UntypedStorage";

constexpr uint64_t kTextSlack = uint64_t{1} << 20;   // texts may hold 2x the input plus this
constexpr uint64_t kMemoDenseSlack = 1024;          // dense memo keys: up to 2x the slots used plus this
constexpr int64_t kSharedInts = 1024;               // ints in [0, this) are one node per value

}  // namespace

// Builds a PickleGraph: the only writer of its arenas.
class PickleBuilder {
 public:
  PickleBuilder(absl::string_view in, const PickleLimits& limits, ObjectState objects)
      : in_(in),
        limits_(limits),
        text_budget_(2 * static_cast<uint64_t>(in.size()) + kTextSlack),
        keep_objects_(objects == ObjectState::kKeep) {}

  absl::StatusOr<PickleGraph> Run() {
    while (true) {
      if (pos_ >= in_.size()) return Bad("the pickle ends without a STOP opcode");
      op_pos_ = pos_;
      const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      if (op == kStop) {
        int root;
        if (!Pop(&root)) return status_;
        g_.root_ = root;
        g_.pickle_bytes_ = static_cast<int64_t>(pos_);
        return std::move(g_);
      }
      if (!Step(op)) return status_;
    }
  }

 private:
  using Node = PickleGraph::Node;

  // --- failures -----------------------------------------------------------
  bool Fail(const std::string& what) {
    status_ = absl::InvalidArgumentError(absl::StrCat("pickle: ", what, " (opcode at byte ", op_pos_, ")"));
    return false;
  }
  absl::Status Bad(const std::string& what) {
    Fail(what);
    return status_;
  }

  // --- input --------------------------------------------------------------
  bool Take(size_t n, absl::string_view* out) {
    if (in_.size() - pos_ < n) return Fail(absl::StrCat("truncated: ", n, " bytes needed, ", in_.size() - pos_, " left"));
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool TakeUnsigned(size_t n, uint64_t* v) {
    absl::string_view b;
    if (!Take(n, &b)) return false;
    *v = 0;
    for (size_t i = 0; i < n; ++i) *v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    return true;
  }
  bool TakeLine(absl::string_view* out) {
    const size_t end = in_.find('\n', pos_);
    if (end == absl::string_view::npos) return Fail("truncated: a text argument has no end of line");
    *out = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return true;
  }
  bool TakeSized(size_t width, absl::string_view* out) {
    uint64_t n;
    if (!TakeUnsigned(width, &n)) return false;
    if (n > in_.size() - pos_) return Fail(absl::StrCat("truncated: a length of ", n, " overruns the pickle"));
    return Take(static_cast<size_t>(n), out);
  }

  // --- records and stack ----------------------------------------------------
  Node& N(int id) { return g_.nodes_[static_cast<size_t>(id)]; }
  PickleKind K(int id) const { return g_.nodes_[static_cast<size_t>(id)].kind; }
  bool New(PickleKind kind, int* id) {
    if (static_cast<int64_t>(g_.nodes_.size()) >= limits_.max_nodes) return Fail("too many objects");
    g_.nodes_.emplace_back();
    g_.nodes_.back().kind = kind;
    *id = static_cast<int>(g_.nodes_.size() - 1);
    return true;
  }
  bool Push(int id) {
    if (static_cast<int64_t>(stack_.size() + marks_.size()) >= limits_.max_stack) return Fail("the stack is too deep");
    stack_.push_back(id);
    return true;
  }
  bool PushNew(PickleKind kind, int* id = nullptr) {
    int local;
    if (!New(kind, &local)) return false;
    if (id != nullptr) *id = local;
    return Push(local);
  }
  // None, True, False and () are immutable: one node each serves every use.
  bool PushShared(PickleKind kind, bool flag, int* slot) {
    if (*slot < 0) {
      if (!New(kind, slot)) return false;
      N(*slot).flag = flag;
    }
    return Push(*slot);
  }
  size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  bool Pop(int* id) {
    if (stack_.size() <= Floor()) return Fail("stack underflow");
    *id = stack_.back();
    stack_.pop_back();
    return true;
  }
  bool Top(int* id) {
    if (stack_.size() <= Floor()) return Fail("stack underflow");
    *id = stack_.back();
    return true;
  }
  bool PopMark(std::vector<int>* items) {
    if (marks_.empty()) return Fail("no MARK to pop to");
    items->assign(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return true;
  }

  // --- texts ----------------------------------------------------------------
  // Appends `text` to the arena (within its budget): its offset.
  bool AddText(absl::string_view text, uint64_t* offset) {
    if (text.size() > 0xFFFFFFFFu || g_.text_.size() + text.size() > text_budget_) {
      return Fail(absl::StrCat("its strings and names exceed twice the pickle's size (", text.size(), " more bytes)"));
    }
    *offset = g_.text_.size();
    g_.text_.append(text.data(), text.size());
    return true;
  }
  bool PushText(PickleKind kind, absl::string_view text) {
    uint64_t offset;
    int id;
    if (!AddText(text, &offset) || !PushNew(kind, &id)) return false;
    N(id).a = static_cast<uint32_t>(text.size());
    N(id).b = static_cast<int64_t>(offset);
    return true;
  }
  // Class and global names repeat (one per object of a class): each distinct
  // name is stored once.
  bool PushName(PickleKind kind, const std::string& name) {
    auto it = names_.find(name);
    if (it == names_.end()) {
      uint64_t offset;
      if (!AddText(name, &offset)) return false;
      it = names_.emplace(name, offset).first;
    }
    int id;
    if (!PushNew(kind, &id)) return false;
    N(id).a = static_cast<uint32_t>(name.size());
    N(id).b = static_cast<int64_t>(it->second);
    return true;
  }
  bool PushObject(const std::string& class_name) { return PushName(PickleKind::kObject, class_name); }
  // An opaque object called or constructed with `args`: recorded when asked.
  bool PushObjectWith(const std::string& class_name, int args) {
    if (!PushObject(class_name)) return false;
    if (keep_objects_) g_.object_parts_[stack_.back()] = {args, -1};
    return true;
  }
  std::string Text(int id) const { return std::string(g_.text(id)); }

  // Ints are immutable: the small ones (offsets, sizes, strides, counts) are
  // one node per value.
  bool PushInt(int64_t v) {
    if (v >= 0 && v < kSharedInts) {
      if (small_ints_.empty()) small_ints_.assign(kSharedInts, -1);
      int& slot = small_ints_[static_cast<size_t>(v)];
      if (slot < 0) {
        if (!New(PickleKind::kInt, &slot)) return false;
        N(slot).b = v;
      }
      return Push(slot);
    }
    int id;
    if (!PushNew(PickleKind::kInt, &id)) return false;
    N(id).b = v;
    return true;
  }
  bool PushFloat(double v) {
    int id;
    if (!PushNew(PickleKind::kFloat, &id)) return false;
    std::memcpy(&N(id).b, &v, sizeof v);
    return true;
  }
  bool PushTuple(const std::vector<int>& items) {
    if (items.empty()) return PushShared(PickleKind::kTuple, false, &empty_tuple_);
    int id;
    if (!PushNew(PickleKind::kTuple, &id)) return false;
    N(id).a = static_cast<uint32_t>(items.size());
    N(id).b = static_cast<int64_t>(g_.tuple_items_.size());
    g_.tuple_items_.insert(g_.tuple_items_.end(), items.begin(), items.end());
    return true;
  }
  // A list or dict: its items vector only once something is in it.
  bool PushContainer(PickleKind kind, std::vector<int> items) {
    int id;
    if (!PushNew(kind, &id)) return false;
    N(id).a = PickleGraph::kNoItems;
    if (!items.empty()) {
      N(id).a = static_cast<uint32_t>(g_.containers_.size());
      g_.containers_.push_back(std::move(items));
    }
    return true;
  }
  // Items of a node, copied: the arenas may move while they are used.
  std::vector<int> Items(int id) const {
    const absl::Span<const int> s = g_.items(id);
    return std::vector<int>(s.begin(), s.end());
  }
  size_t ItemCount(int id) const { return g_.items(id).size(); }

  // A little-endian two's complement integer of `b.size()` bytes (LONG1/4).
  bool PushLongBytes(absl::string_view b) {
    if (b.empty()) return PushInt(0);
    const bool negative = (static_cast<uint8_t>(b.back()) & 0x80) != 0;
    for (size_t i = 8; i < b.size(); ++i) {  // bytes beyond 64 bits must be sign extension
      if (static_cast<uint8_t>(b[i]) != (negative ? 0xFF : 0x00)) return PushObject(kBigInt);
    }
    if (b.size() > 8 && ((static_cast<uint8_t>(b[7]) & 0x80) != 0) != negative) return PushObject(kBigInt);
    uint64_t v = negative ? ~uint64_t{0} : 0;
    for (size_t i = 0; i < b.size() && i < 8; ++i) {
      v &= ~(uint64_t{0xFF} << (8 * i));
      v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    }
    return PushInt(static_cast<int64_t>(v));
  }
  bool PushDecimal(absl::string_view text) {
    if (!text.empty() && text.back() == 'L') text.remove_suffix(1);
    int64_t v;
    if (absl::SimpleAtoi(text, &v)) return PushInt(v);
    for (char c : text) {
      if (!(c == '-' || c == '+' || (c >= '0' && c <= '9'))) return Fail("a malformed decimal integer");
    }
    return PushObject(kBigInt);
  }

  // --- memo ---------------------------------------------------------------
  // Python numbers memo slots 0, 1, 2, ...: those live in a vector; any other
  // key in a map. Either way at most max_memo slots.
  bool Put(uint64_t key) {
    int id;
    if (!Top(&id)) return false;
    const bool fresh = !(key < dense_.size() && dense_[key] >= 0) && sparse_.count(key) == 0;
    if (fresh && memo_count_ >= static_cast<uint64_t>(limits_.max_memo)) return Fail("the memo is too large");
    if (fresh) ++memo_count_;
    if (key < dense_.size() || key < 2 * memo_count_ + kMemoDenseSlack) {
      if (key >= dense_.size()) dense_.resize(key + 1, -1);
      dense_[key] = id;
      sparse_.erase(key);
    } else {
      sparse_[key] = id;
    }
    return true;
  }
  bool Get(uint64_t key) {
    if (key < dense_.size() && dense_[key] >= 0) return Push(dense_[key]);
    auto it = sparse_.find(key);
    if (it == sparse_.end()) return Fail(absl::StrCat("memo key ", key, " was never stored"));
    return Push(it->second);
  }

  // --- calls (names only; see the header for the whitelist) ------------------
  bool IsInt(int id) const { return K(id) == PickleKind::kInt; }
  bool IntTuple(int id, std::vector<int64_t>* out) const {
    if (K(id) != PickleKind::kTuple && K(id) != PickleKind::kList) return false;
    out->clear();
    for (int e : g_.items(id)) {
      if (!IsInt(e)) return false;
      out->push_back(g_.integer(e));
    }
    return true;
  }

  // _rebuild_tensor_v2(storage, offset, sizes, strides, requires_grad, hooks[, metadata]): the
  // storage's dtype; _rebuild_tensor_v3(..., hooks, dtype[, metadata]): the dtype named.
  bool RebuildTensor(const std::vector<int>& args, bool v3) {
    const std::string usage =
        v3 ? "torch._utils._rebuild_tensor_v3 needs (storage, offset, sizes, strides, requires_grad, hooks, dtype)"
           : "torch._utils._rebuild_tensor_v2 needs (storage, offset, sizes, strides, requires_grad, hooks)";
    if (args.size() < (v3 ? 7u : 5u) || args.size() > (v3 ? 8u : 7u)) return Fail(usage);
    if (K(args[0]) != PickleKind::kStorage || !IsInt(args[1])) return Fail(usage);
    std::vector<int64_t> sizes, strides;
    if (!IntTuple(args[2], &sizes) || !IntTuple(args[3], &strides)) return Fail(usage);
    if (K(args[4]) != PickleKind::kBool && !IsInt(args[4])) return Fail(usage);
    PickleGraph::Tensor t;
    t.dtype = g_.storages_[N(args[0]).a].dtype;
    if (v3) {
      if (K(args[6]) != PickleKind::kGlobal) return Fail(usage);
      const DtypeInfo* d = FindDtypeByTorchName(g_.text(args[6]));
      if (d == nullptr || !absl::StartsWith(g_.text(args[6]), "torch.")) {
        // Opaque, so that whoever imports it names the key (and why).
        const std::string why = UnavailableDtypeMessage(g_.text(args[6]));
        return PushObject(absl::StrCat("a ", Text(args[6]), " tensor (",
                                       why.empty() ? "a dtype shardlight does not store" : why, ")"));
      }
      if (t.dtype != c10::kByte && t.dtype != d->dtype) {
        return Fail(absl::StrCat("a ", d->torch_name, " tensor over a typed storage of another dtype"));
      }
      t.dtype = d->dtype;
    }
    t.storage = args[0];
    t.storage_offset = g_.integer(args[1]);
    t.sizes = static_cast<uint32_t>(sizes.size());
    t.strides = static_cast<uint32_t>(strides.size());
    t.dims = g_.dims_.size();
    t.requires_grad = g_.boolean(args[4]) || g_.integer(args[4]) != 0;
    int id;
    if (!New(PickleKind::kTensor, &id)) return false;
    N(id).a = static_cast<uint32_t>(g_.tensors_.size());
    g_.tensors_.push_back(t);
    g_.dims_.insert(g_.dims_.end(), sizes.begin(), sizes.end());
    g_.dims_.insert(g_.dims_.end(), strides.begin(), strides.end());
    return Push(id);
  }

  bool Call(int callable, int args_id) {
    if (K(callable) != PickleKind::kGlobal) return PushObject(absl::StrCat("<call of a ", PickleKindName(K(callable)), ">"));
    const std::string name = Text(callable);
    static const char* const kUnderstood[] = {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3",
                                              "torch._utils._rebuild_parameter",
                                              "torch._utils._rebuild_parameter_with_state", "collections.OrderedDict",
                                              "copyreg._reconstructor", "_codecs.encode", "__builtin__.bytes",
                                              "builtins.bytes"};
    bool understood = false;
    for (const char* u : kUnderstood) understood = understood || name == u;
    if (!understood) return PushObjectWith(name, args_id);  // only ever named
    if (K(args_id) != PickleKind::kTuple) return Fail(absl::StrCat("the arguments to ", name, " are not a tuple"));
    const std::vector<int> args = Items(args_id);
    if (name == "torch._utils._rebuild_tensor_v2") return RebuildTensor(args, false);
    if (name == "torch._utils._rebuild_tensor_v3") return RebuildTensor(args, true);
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      if (args.empty() || K(args[0]) != PickleKind::kTensor) return Fail(name + " needs a tensor");
      return Push(args[0]);
    }
    if (name == "collections.OrderedDict") {
      std::vector<int> items;
      if (args.size() == 1) {
        const PickleKind pairs = K(args[0]);
        if (pairs != PickleKind::kList && pairs != PickleKind::kTuple) return Fail(name + " needs pairs");
        for (int p : g_.items(args[0])) {
          if (K(p) != PickleKind::kTuple || ItemCount(p) != 2) return Fail(name + " needs pairs");
          items.push_back(g_.items(p)[0]);
          items.push_back(g_.items(p)[1]);
        }
      } else if (!args.empty()) {
        return Fail(name + " takes at most one argument");
      }
      return PushContainer(PickleKind::kDict, std::move(items));
    }
    if (name == "_codecs.encode") return Latin1Bytes(args);
    if (name == "__builtin__.bytes" || name == "builtins.bytes") {
      // Protocol 2's b'' (bytes() called with no argument); the only call of it a pickler writes.
      if (!args.empty()) return Fail(name + " is called with arguments (only bytes() is read)");
      return PushText(PickleKind::kBytes, "");
    }
    if (name == "copyreg._reconstructor" && !args.empty() && K(args[0]) == PickleKind::kGlobal) {
      return PushObject(Text(args[0]));
    }
    return PushObject(name);
  }

  // _codecs.encode(text, 'latin1'): how pickle protocols 0-2 spell a bytes
  // value (each byte a code point below 256 of the text). Read as the bytes,
  // never called.
  bool Latin1Bytes(const std::vector<int>& args) {
    const std::string usage = "_codecs.encode is read only as encode(str, 'latin1'), protocol 2's bytes";
    if (args.size() != 2 || K(args[0]) != PickleKind::kString || K(args[1]) != PickleKind::kString) return Fail(usage);
    const absl::string_view encoding = g_.text(args[1]);
    if (encoding != "latin1" && encoding != "latin-1" && encoding != "latin_1") return Fail(usage);
    const absl::string_view text = g_.text(args[0]);
    std::string bytes;
    bytes.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      const uint8_t c = static_cast<uint8_t>(text[i]);
      if (c < 0x80) {
        bytes.push_back(static_cast<char>(c));
      } else if ((c == 0xC2 || c == 0xC3) && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
        bytes.push_back(static_cast<char>(((c & 0x03) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F)));
        ++i;
      } else {
        return Fail("_codecs.encode(str, 'latin1') of a text that is not UTF-8 of code points below 256");
      }
    }
    return PushText(PickleKind::kBytes, bytes);
  }

  bool NewObject(int cls, int args) {
    if (K(cls) != PickleKind::kGlobal) return PushObject(absl::StrCat("<instance of a ", PickleKindName(K(cls)), ">"));
    if (g_.text(cls) == "collections.OrderedDict") return PushContainer(PickleKind::kDict, {});
    return PushObjectWith(Text(cls), args);
  }

  bool PersistentId(int pid) {
    const std::string usage = "a persistent id must be ('storage', torch.<T>Storage, key, location, numel)";
    if (K(pid) != PickleKind::kTuple || ItemCount(pid) != 5) return Fail(usage);
    const std::vector<int> p = Items(pid);
    if (K(p[0]) != PickleKind::kString || g_.text(p[0]) != "storage" || K(p[1]) != PickleKind::kGlobal ||
        K(p[2]) != PickleKind::kString || K(p[3]) != PickleKind::kString || !IsInt(p[4])) {
      return Fail(usage);
    }
    c10::ScalarType dtype;
    if (!StorageClassDtype(g_.text(p[1]), &dtype)) return Fail("storage class " + Text(p[1]) + " is not supported");
    const int64_t numel = g_.integer(p[4]);
    if (numel < 0) return Fail("a storage has a negative size");
    PickleGraph::Storage s;  // its texts are those of the key and location strings
    s.key = static_cast<uint64_t>(N(p[2]).b);
    s.key_len = N(p[2]).a;
    s.location = static_cast<uint64_t>(N(p[3]).b);
    s.location_len = N(p[3]).a;
    s.numel = numel;
    s.dtype = dtype;
    int id;
    if (!New(PickleKind::kStorage, &id)) return false;
    N(id).a = static_cast<uint32_t>(g_.storages_.size());
    g_.storages_.push_back(s);
    return Push(id);
  }

  // --- one opcode -----------------------------------------------------------
  bool Step(uint8_t op) {
    absl::string_view b;
    uint64_t u = 0;
    int a = 0, c = 0, d = 0;
    std::vector<int> items;
    switch (op) {
      case kProto:
        if (!TakeUnsigned(1, &u)) return false;
        if (u > 5) return Fail(absl::StrCat("pickle protocol ", u, " is not supported"));
        return true;
      case kFrame:
        return TakeUnsigned(8, &u);  // frames only group opcodes
      case kMark:
        if (static_cast<int64_t>(stack_.size() + marks_.size()) >= limits_.max_stack) return Fail("the stack is too deep");
        marks_.push_back(stack_.size());
        return true;
      case kPop:
        if (stack_.size() > Floor()) {
          stack_.pop_back();
          return true;
        }
        return PopMark(&items);
      case kPopMark:
        return PopMark(&items);
      case kDup:
        return Top(&a) && Push(a);
      case kNone:
        return PushShared(PickleKind::kNone, false, &none_);
      case kNewTrue:
        return PushShared(PickleKind::kBool, true, &true_);
      case kNewFalse:
        return PushShared(PickleKind::kBool, false, &false_);
      case kInt:
        if (!TakeLine(&b)) return false;
        if (b == "00" || b == "01") return b == "01" ? PushShared(PickleKind::kBool, true, &true_)
                                                     : PushShared(PickleKind::kBool, false, &false_);
        return PushDecimal(b);
      case kLong:
        return TakeLine(&b) && PushDecimal(b);
      case kBinInt:
        return TakeUnsigned(4, &u) && PushInt(static_cast<int32_t>(static_cast<uint32_t>(u)));
      case kBinInt1:
        return TakeUnsigned(1, &u) && PushInt(static_cast<int64_t>(u));
      case kBinInt2:
        return TakeUnsigned(2, &u) && PushInt(static_cast<int64_t>(u));
      case kLong1:
        return TakeSized(1, &b) && PushLongBytes(b);
      case kLong4:
        if (!TakeUnsigned(4, &u)) return false;
        if (static_cast<int32_t>(static_cast<uint32_t>(u)) < 0) return Fail("a negative LONG4 length");
        pos_ -= 4;
        return TakeSized(4, &b) && PushLongBytes(b);
      case kFloat: {
        if (!TakeLine(&b)) return false;
        double v;
        if (!absl::SimpleAtod(b, &v)) return Fail("a malformed float");
        return PushFloat(v);
      }
      case kBinFloat: {
        if (!Take(8, &b)) return false;
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(b[i]);  // big-endian
        double v;
        std::memcpy(&v, &bits, sizeof v);
        return PushFloat(v);
      }
      case kString:
        if (!TakeLine(&b)) return false;
        if (b.size() >= 2 && (b.front() == '\'' || b.front() == '"') && b.back() == b.front()) b = b.substr(1, b.size() - 2);
        return PushText(PickleKind::kString, b);
      case kUnicode:
        return TakeLine(&b) && PushText(PickleKind::kString, b);
      case kBinString:
        if (!TakeUnsigned(4, &u)) return false;
        if (static_cast<int32_t>(static_cast<uint32_t>(u)) < 0) return Fail("a negative BINSTRING length");
        pos_ -= 4;
        return TakeSized(4, &b) && PushText(PickleKind::kString, b);
      case kShortBinString:
      case kShortBinUnicode:
        return TakeSized(1, &b) && PushText(PickleKind::kString, b);
      case kBinUnicode:
        return TakeSized(4, &b) && PushText(PickleKind::kString, b);
      case kBinUnicode8:
        return TakeSized(8, &b) && PushText(PickleKind::kString, b);
      case kShortBinBytes:
        return TakeSized(1, &b) && PushText(PickleKind::kBytes, b);
      case kBinBytes:
        return TakeSized(4, &b) && PushText(PickleKind::kBytes, b);
      case kBinBytes8:
      case kByteArray8:
        return TakeSized(8, &b) && PushText(PickleKind::kBytes, b);
      case kEmptyList:
        return PushContainer(PickleKind::kList, {});
      case kEmptyTuple:
        return PushTuple({});
      case kEmptyDict:
        return PushContainer(PickleKind::kDict, {});
      case kList:
        return PopMark(&items) && PushContainer(PickleKind::kList, std::move(items));
      case kTuple:
        return PopMark(&items) && PushTuple(items);
      case kDict:
        if (!PopMark(&items)) return false;
        if (items.size() % 2 != 0) return Fail("DICT with an odd number of items");
        return PushContainer(PickleKind::kDict, std::move(items));
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const size_t n = op - kTuple1 + 1;
        if (stack_.size() < Floor() + n) return Fail("stack underflow");
        items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        return PushTuple(items);
      }
      case kAppend:
        if (!Pop(&a) || !Top(&c)) return false;
        items.push_back(a);
        return AddItems(c, items, PickleKind::kList);
      case kAppends:
        return PopMark(&items) && Top(&c) && AddItems(c, items, PickleKind::kList);
      case kSetItem:
        if (!Pop(&a) || !Pop(&d) || !Top(&c)) return false;
        items = {d, a};
        return AddItems(c, items, PickleKind::kDict);
      case kSetItems:
        if (!PopMark(&items) || !Top(&c)) return false;
        if (items.size() % 2 != 0) return Fail("SETITEMS with an odd number of items");
        return AddItems(c, items, PickleKind::kDict);
      case kEmptySet:
        return PushObject("builtins.set");
      case kAddItems:
        return PopMark(&items) && Top(&c) && AddItems(c, items, PickleKind::kObject);
      case kFrozenSet:
        return PopMark(&items) && PushObject("builtins.frozenset");
      case kPut:
        if (!TakeLine(&b)) return false;
        if (!absl::SimpleAtoi(b, &u)) return Fail("a malformed PUT key");
        return Put(u);
      case kBinPut:
        return TakeUnsigned(1, &u) && Put(u);
      case kLongBinPut:
        return TakeUnsigned(4, &u) && Put(u);
      case kMemoize:
        return Put(memo_count_);
      case kGet:
        if (!TakeLine(&b)) return false;
        if (!absl::SimpleAtoi(b, &u)) return Fail("a malformed GET key");
        return Get(u);
      case kBinGet:
        return TakeUnsigned(1, &u) && Get(u);
      case kLongBinGet:
        return TakeUnsigned(4, &u) && Get(u);
      case kGlobal: {
        absl::string_view module, name;
        if (!TakeLine(&module) || !TakeLine(&name)) return false;
        return PushName(PickleKind::kGlobal, absl::StrCat(module, ".", name));
      }
      case kStackGlobal:
        if (!Pop(&a) || !Pop(&c)) return false;
        if (K(a) != PickleKind::kString || K(c) != PickleKind::kString) return Fail("STACK_GLOBAL needs two strings");
        return PushName(PickleKind::kGlobal, absl::StrCat(g_.text(c), ".", g_.text(a)));
      case kReduce:
        return Pop(&a) && Pop(&c) && Call(c, a);
      case kNewObj:
        return Pop(&a) && Pop(&c) && NewObject(c, a);
      case kNewObjEx:
        return Pop(&d) && Pop(&a) && Pop(&c) && NewObject(c, a);
      case kBuild:  // state is never applied; recorded when asked
        if (!Pop(&a) || !Top(&c)) return false;
        if (keep_objects_ && K(c) == PickleKind::kObject) {
          auto it = g_.object_parts_.find(c);
          if (it != g_.object_parts_.end()) it->second.second = a;
        }
        return true;
      case kInst: {
        absl::string_view module, name;
        if (!TakeLine(&module) || !TakeLine(&name) || !PopMark(&items)) return false;
        return PushObject(absl::StrCat(module, ".", name));
      }
      case kObj:
        if (!PopMark(&items)) return false;
        if (items.empty()) return Fail("OBJ without a class");
        return NewObject(items[0], -1);
      case kBinPersId:
        return Pop(&a) && PersistentId(a);
      case kPersId:
        return Fail("text persistent ids are not supported");
      case kExt1:
      case kExt2:
      case kExt4:
        return Fail("extension registry opcodes are not supported");
      case kNextBuffer:
      case kReadonlyBuffer:
        return Fail("out-of-band buffers are not supported");
      default:
        return Fail(absl::StrCat("unknown opcode 0x", absl::Hex(op, absl::kZeroPad2)));
    }
  }

  // APPEND(S)/SETITEM(S)/ADDITEMS into `target`: kept for a container of the
  // expected kind, discarded for an opaque object (never built).
  bool AddItems(int target, const std::vector<int>& items, PickleKind expected) {
    const PickleKind kind = K(target);
    if (kind == PickleKind::kObject) return true;
    if (kind != expected) {
      return Fail(absl::StrCat("items added to a ", PickleKindName(kind), " (", PickleKindName(expected), " expected)"));
    }
    if (items.empty()) return true;
    if (static_cast<int64_t>(ItemCount(target) + items.size()) > limits_.max_nodes) return Fail("a container is too large");
    Node& t = N(target);
    if (t.a == PickleGraph::kNoItems) {
      t.a = static_cast<uint32_t>(g_.containers_.size());
      g_.containers_.emplace_back();
    }
    std::vector<int>& into = g_.containers_[t.a];
    into.insert(into.end(), items.begin(), items.end());
    return true;
  }

  absl::string_view in_;
  PickleLimits limits_;
  const uint64_t text_budget_;
  const bool keep_objects_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  PickleGraph g_;
  std::vector<int> stack_;
  std::vector<size_t> marks_;
  std::vector<int> dense_;                      // memo slots 0..n (-1: empty)
  std::unordered_map<uint64_t, int> sparse_;    // other memo keys
  uint64_t memo_count_ = 0;
  std::unordered_map<std::string, uint64_t> names_;  // global/class name -> text offset
  int none_ = -1, true_ = -1, false_ = -1, empty_tuple_ = -1;
  std::vector<int> small_ints_;  // node of each int in [0, kSharedInts), -1 until used
  absl::Status status_;
};

bool PickleGraph::boolean(int id) const { return kind(id) == PickleKind::kBool && nodes_[static_cast<size_t>(id)].flag; }

int64_t PickleGraph::integer(int id) const { return kind(id) == PickleKind::kInt ? nodes_[static_cast<size_t>(id)].b : 0; }

double PickleGraph::real(int id) const {
  double v = 0;
  if (kind(id) == PickleKind::kFloat) std::memcpy(&v, &nodes_[static_cast<size_t>(id)].b, sizeof v);
  return v;
}

absl::string_view PickleGraph::text(int id) const {
  const Node& n = nodes_[static_cast<size_t>(id)];
  switch (n.kind) {
    case PickleKind::kString:
    case PickleKind::kBytes:
    case PickleKind::kGlobal:
    case PickleKind::kObject:
      return absl::string_view(text_).substr(static_cast<size_t>(n.b), n.a);
    case PickleKind::kStorage:
      return storage(id).key;
    default:
      return {};
  }
}

absl::Span<const int> PickleGraph::items(int id) const {
  const Node& n = nodes_[static_cast<size_t>(id)];
  if (n.kind == PickleKind::kTuple) return absl::Span<const int>(tuple_items_).subspan(static_cast<size_t>(n.b), n.a);
  if ((n.kind == PickleKind::kList || n.kind == PickleKind::kDict) && n.a != kNoItems) return containers_[n.a];
  return {};
}

PickleStorage PickleGraph::storage(int id) const {
  if (kind(id) != PickleKind::kStorage) return {};
  const Storage& s = storages_[nodes_[static_cast<size_t>(id)].a];
  const absl::string_view text(text_);
  return {text.substr(s.key, s.key_len), text.substr(s.location, s.location_len), s.dtype, s.numel};
}

PickleTensor PickleGraph::tensor(int id) const {
  if (kind(id) != PickleKind::kTensor) return {};
  const Tensor& t = tensors_[nodes_[static_cast<size_t>(id)].a];
  const absl::Span<const int64_t> dims(dims_);
  return {t.storage, t.storage_offset, dims.subspan(t.dims, t.sizes), dims.subspan(t.dims + t.sizes, t.strides),
          t.requires_grad, t.dtype};
}

int64_t PickleGraph::MemoryBytes() const {
  int64_t bytes = static_cast<int64_t>(nodes_.capacity() * sizeof(Node) + text_.capacity() +
                                       tuple_items_.capacity() * sizeof(int) +
                                       containers_.capacity() * sizeof(std::vector<int>) +
                                       storages_.capacity() * sizeof(Storage) + tensors_.capacity() * sizeof(Tensor) +
                                       dims_.capacity() * sizeof(int64_t));
  for (const std::vector<int>& c : containers_) bytes += static_cast<int64_t>(c.capacity() * sizeof(int));
  bytes += static_cast<int64_t>(object_parts_.size() * (sizeof(int) * 3 + 2 * sizeof(void*)));  // a map node each
  return bytes;
}

const char* PickleKindName(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone: return "None";
    case PickleKind::kBool: return "bool";
    case PickleKind::kInt: return "int";
    case PickleKind::kFloat: return "float";
    case PickleKind::kString: return "str";
    case PickleKind::kBytes: return "bytes";
    case PickleKind::kList: return "list";
    case PickleKind::kTuple: return "tuple";
    case PickleKind::kDict: return "dict";
    case PickleKind::kGlobal: return "global";
    case PickleKind::kStorage: return "storage";
    case PickleKind::kTensor: return "tensor";
    case PickleKind::kObject: return "object";
  }
  return "?";
}

bool StorageClassDtype(absl::string_view qualified_name, c10::ScalarType* dtype) {
  if (qualified_name == kUntypedStorage) {
    *dtype = c10::kByte;
    return true;
  }
  const DtypeInfo* d = FindDtypeByStorageClass(qualified_name);
  if (d == nullptr || !absl::StartsWith(qualified_name, "torch.")) return false;
  *dtype = d->dtype;
  return true;
}

int PickleGraph::object_arguments(int id) const {
  auto it = object_parts_.find(id);
  return it == object_parts_.end() ? -1 : it->second.first;
}

int PickleGraph::object_state(int id) const {
  auto it = object_parts_.find(id);
  return it == object_parts_.end() ? -1 : it->second.second;
}

absl::StatusOr<PickleGraph> ReadPickle(absl::string_view bytes, const PickleLimits& limits, ObjectState objects) {
  return PickleBuilder(bytes, limits, objects).Run();
}

}  // namespace shardlight::sharded::checkpoint::pytorch
