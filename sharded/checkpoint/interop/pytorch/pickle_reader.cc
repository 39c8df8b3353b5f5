// The restricted pickle machine: one case per opcode, each building plain
// records. Nothing here imports, calls or instantiates anything.
#include "sharded/checkpoint/interop/pytorch/pickle_reader.h"

#include <cstring>
#include <unordered_map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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

struct StorageClass {
  const char* name;
  c10::ScalarType dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"torch.FloatStorage", c10::kFloat},   {"torch.DoubleStorage", c10::kDouble},
    {"torch.HalfStorage", c10::kHalf},     {"torch.BFloat16Storage", c10::kBFloat16},
    {"torch.LongStorage", c10::kLong},     {"torch.IntStorage", c10::kInt},
    {"torch.ShortStorage", c10::kShort},   {"torch.CharStorage", c10::kChar},
    {"torch.ByteStorage", c10::kByte},     {"torch.BoolStorage", c10::kBool},
};

class Machine {
 public:
  Machine(absl::string_view in, const PickleLimits& limits, ObjectState objects)
      : in_(in), limits_(limits), keep_objects_(objects == ObjectState::kKeep) {}

  absl::StatusOr<PickleGraph> Run() {
    while (true) {
      if (pos_ >= in_.size()) return Bad("the pickle ends without a STOP opcode");
      op_pos_ = pos_;
      const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      if (op == kStop) {
        int root;
        if (!Pop(&root)) return status_;
        graph_.root = root;
        return std::move(graph_);
      }
      if (!Step(op)) return status_;
    }
  }

 private:
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
  bool New(PickleKind kind, int* id) {
    if (static_cast<int64_t>(graph_.nodes.size()) >= limits_.max_nodes) return Fail("too many objects");
    graph_.nodes.emplace_back();
    graph_.nodes.back().kind = kind;
    *id = static_cast<int>(graph_.nodes.size() - 1);
    return true;
  }
  PickleNode& N(int id) { return graph_.nodes[static_cast<size_t>(id)]; }
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
  // `text` is a copy: it may come from a record that PushNew moves.
  bool PushText(PickleKind kind, std::string text) {
    int id;
    if (!PushNew(kind, &id)) return false;
    N(id).text = std::move(text);
    return true;
  }
  bool PushInt(int64_t v) {
    int id;
    if (!PushNew(PickleKind::kInt, &id)) return false;
    N(id).integer = v;
    return true;
  }
  bool PushObject(std::string class_name) { return PushText(PickleKind::kObject, std::move(class_name)); }
  // An opaque object called or constructed with `args`: kept as its
  // arguments when asked (ObjectState::kKeep).
  bool PushObjectWith(std::string class_name, int args) {
    if (!PushObject(std::move(class_name))) return false;
    if (keep_objects_) N(stack_.back()).items = {args, -1};
    return true;
  }
  bool PushSequence(PickleKind kind, std::vector<int> items) {
    int id;
    if (!PushNew(kind, &id)) return false;
    N(id).items = std::move(items);
    return true;
  }

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
  bool Put(uint64_t key) {
    int id;
    if (!Top(&id)) return false;
    if (memo_.size() >= static_cast<size_t>(limits_.max_memo) && memo_.count(key) == 0) return Fail("the memo is too large");
    memo_[key] = id;
    return true;
  }
  bool Get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return Fail(absl::StrCat("memo key ", key, " was never stored"));
    return Push(it->second);
  }

  // --- calls (names only; see the header for the whitelist) ------------------
  bool IsInt(int id) const { return graph_.nodes[id].kind == PickleKind::kInt; }
  bool IntTuple(int id, std::vector<int64_t>* out) {
    const PickleNode& n = N(id);
    if (n.kind != PickleKind::kTuple && n.kind != PickleKind::kList) return false;
    out->clear();
    for (int e : n.items) {
      if (!IsInt(e)) return false;
      out->push_back(N(e).integer);
    }
    return true;
  }

  bool RebuildTensor(const std::vector<int>& args) {
    const std::string usage = "torch._utils._rebuild_tensor_v2 needs (storage, offset, sizes, strides, requires_grad, hooks)";
    if (args.size() < 5 || args.size() > 7) return Fail(usage);
    if (N(args[0]).kind != PickleKind::kStorage || !IsInt(args[1])) return Fail(usage);
    std::vector<int64_t> sizes, strides;
    if (!IntTuple(args[2], &sizes) || !IntTuple(args[3], &strides)) return Fail(usage);
    if (N(args[4]).kind != PickleKind::kBool && !IsInt(args[4])) return Fail(usage);
    int id;
    if (!New(PickleKind::kTensor, &id)) return false;
    PickleNode& t = N(id);
    t.storage = args[0];
    t.storage_offset = N(args[1]).integer;
    t.sizes = std::move(sizes);
    t.strides = std::move(strides);
    t.requires_grad = N(args[4]).boolean || N(args[4]).integer != 0;
    t.dtype = N(args[0]).dtype;
    return Push(id);
  }

  bool Call(int callable, int args_id) {
    const PickleNode& f = N(callable);
    if (f.kind != PickleKind::kGlobal) return PushObject(absl::StrCat("<call of a ", PickleKindName(f.kind), ">"));
    const std::string name = f.text;
    static const char* const kUnderstood[] = {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
                                              "torch._utils._rebuild_parameter_with_state", "collections.OrderedDict",
                                              "copyreg._reconstructor"};
    bool understood = false;
    for (const char* u : kUnderstood) understood = understood || name == u;
    if (!understood) return PushObjectWith(name, args_id);  // only ever named
    if (N(args_id).kind != PickleKind::kTuple) return Fail(absl::StrCat("the arguments to ", name, " are not a tuple"));
    const std::vector<int> args = N(args_id).items;
    if (name == "torch._utils._rebuild_tensor_v2") return RebuildTensor(args);
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      if (args.empty() || N(args[0]).kind != PickleKind::kTensor) return Fail(name + " needs a tensor");
      return Push(args[0]);
    }
    if (name == "collections.OrderedDict") {
      std::vector<int> items;
      if (args.size() == 1) {
        const PickleNode& pairs = N(args[0]);
        if (pairs.kind != PickleKind::kList && pairs.kind != PickleKind::kTuple) return Fail(name + " needs pairs");
        for (int p : pairs.items) {
          if (N(p).kind != PickleKind::kTuple || N(p).items.size() != 2) return Fail(name + " needs pairs");
          items.push_back(N(p).items[0]);
          items.push_back(N(p).items[1]);
        }
      } else if (!args.empty()) {
        return Fail(name + " takes at most one argument");
      }
      return PushSequence(PickleKind::kDict, std::move(items));
    }
    if (name == "copyreg._reconstructor" && !args.empty() && N(args[0]).kind == PickleKind::kGlobal) {
      return PushObject(N(args[0]).text);
    }
    return PushObject(name);
  }

  bool NewObject(int cls, int args) {
    if (N(cls).kind != PickleKind::kGlobal) return PushObject(absl::StrCat("<instance of a ", PickleKindName(N(cls).kind), ">"));
    if (N(cls).text == "collections.OrderedDict") return PushSequence(PickleKind::kDict, {});
    return PushObjectWith(N(cls).text, args);
  }

  bool PersistentId(int pid) {
    const PickleNode& p = N(pid);
    const std::string usage = "a persistent id must be ('storage', torch.<T>Storage, key, location, numel)";
    if (p.kind != PickleKind::kTuple || p.items.size() != 5) return Fail(usage);
    const PickleNode& tag = N(p.items[0]);
    const PickleNode& cls = N(p.items[1]);
    const PickleNode& key = N(p.items[2]);
    const PickleNode& location = N(p.items[3]);
    if (tag.kind != PickleKind::kString || tag.text != "storage" || cls.kind != PickleKind::kGlobal ||
        key.kind != PickleKind::kString || location.kind != PickleKind::kString || !IsInt(p.items[4])) {
      return Fail(usage);
    }
    c10::ScalarType dtype;
    if (!StorageClassDtype(cls.text, &dtype)) return Fail("storage class " + cls.text + " is not supported");
    const int64_t numel = N(p.items[4]).integer;
    if (numel < 0) return Fail("a storage has a negative size");
    std::string key_text = key.text, location_text = location.text;  // New() may move the records
    int id;
    if (!New(PickleKind::kStorage, &id)) return false;
    PickleNode& s = N(id);
    s.text = std::move(key_text);
    s.dtype = dtype;
    s.location = std::move(location_text);
    s.numel = numel;
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
        return PushNew(PickleKind::kNone);
      case kNewTrue:
      case kNewFalse:
        if (!PushNew(PickleKind::kBool, &a)) return false;
        N(a).boolean = op == kNewTrue;
        return true;
      case kInt:
        if (!TakeLine(&b)) return false;
        if (b == "00" || b == "01") {
          if (!PushNew(PickleKind::kBool, &a)) return false;
          N(a).boolean = b == "01";
          return true;
        }
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
        if (!PushNew(PickleKind::kFloat, &a)) return false;
        N(a).real = v;
        return true;
      }
      case kBinFloat: {
        if (!Take(8, &b)) return false;
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(b[i]);  // big-endian
        double v;
        std::memcpy(&v, &bits, sizeof v);
        if (!PushNew(PickleKind::kFloat, &a)) return false;
        N(a).real = v;
        return true;
      }
      case kString:
        if (!TakeLine(&b)) return false;
        if (b.size() >= 2 && (b.front() == '\'' || b.front() == '"') && b.back() == b.front()) b = b.substr(1, b.size() - 2);
        return PushText(PickleKind::kString, std::string(b));
      case kUnicode:
        return TakeLine(&b) && PushText(PickleKind::kString, std::string(b));
      case kBinString:
        if (!TakeUnsigned(4, &u)) return false;
        if (static_cast<int32_t>(static_cast<uint32_t>(u)) < 0) return Fail("a negative BINSTRING length");
        pos_ -= 4;
        return TakeSized(4, &b) && PushText(PickleKind::kString, std::string(b));
      case kShortBinString:
      case kShortBinUnicode:
        return TakeSized(1, &b) && PushText(PickleKind::kString, std::string(b));
      case kBinUnicode:
        return TakeSized(4, &b) && PushText(PickleKind::kString, std::string(b));
      case kBinUnicode8:
        return TakeSized(8, &b) && PushText(PickleKind::kString, std::string(b));
      case kShortBinBytes:
        return TakeSized(1, &b) && PushText(PickleKind::kBytes, std::string(b));
      case kBinBytes:
        return TakeSized(4, &b) && PushText(PickleKind::kBytes, std::string(b));
      case kBinBytes8:
      case kByteArray8:
        return TakeSized(8, &b) && PushText(PickleKind::kBytes, std::string(b));
      case kEmptyList:
        return PushNew(PickleKind::kList);
      case kEmptyTuple:
        return PushNew(PickleKind::kTuple);
      case kEmptyDict:
        return PushNew(PickleKind::kDict);
      case kList:
        return PopMark(&items) && PushSequence(PickleKind::kList, std::move(items));
      case kTuple:
        return PopMark(&items) && PushSequence(PickleKind::kTuple, std::move(items));
      case kDict:
        if (!PopMark(&items)) return false;
        if (items.size() % 2 != 0) return Fail("DICT with an odd number of items");
        return PushSequence(PickleKind::kDict, std::move(items));
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const size_t n = op - kTuple1 + 1;
        if (stack_.size() < Floor() + n) return Fail("stack underflow");
        items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
        stack_.resize(stack_.size() - n);
        return PushSequence(PickleKind::kTuple, std::move(items));
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
        return Put(memo_.size());
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
        return PushText(PickleKind::kGlobal, absl::StrCat(module, ".", name));
      }
      case kStackGlobal:
        if (!Pop(&a) || !Pop(&c)) return false;
        if (N(a).kind != PickleKind::kString || N(c).kind != PickleKind::kString) return Fail("STACK_GLOBAL needs two strings");
        return PushText(PickleKind::kGlobal, absl::StrCat(N(c).text, ".", N(a).text));
      case kReduce:
        return Pop(&a) && Pop(&c) && Call(c, a);
      case kNewObj:
        return Pop(&a) && Pop(&c) && NewObject(c, a);
      case kNewObjEx:
        return Pop(&d) && Pop(&a) && Pop(&c) && NewObject(c, a);
      case kBuild:  // state is never applied; recorded when asked
        if (!Pop(&a) || !Top(&c)) return false;
        if (keep_objects_ && N(c).kind == PickleKind::kObject && N(c).items.size() == 2) N(c).items[1] = a;
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
    PickleNode& t = N(target);
    if (t.kind == PickleKind::kObject) return true;
    if (t.kind != expected) {
      return Fail(absl::StrCat("items added to a ", PickleKindName(t.kind), " (", PickleKindName(expected), " expected)"));
    }
    if (static_cast<int64_t>(t.items.size() + items.size()) > limits_.max_nodes) return Fail("a container is too large");
    t.items.insert(t.items.end(), items.begin(), items.end());
    return true;
  }

  absl::string_view in_;
  PickleLimits limits_;
  bool keep_objects_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  PickleGraph graph_;
  std::vector<int> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, int> memo_;
  absl::Status status_;
};

}  // namespace

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
  for (const StorageClass& c : kStorageClasses) {
    if (qualified_name == c.name) {
      *dtype = c.dtype;
      return true;
    }
  }
  return false;
}

absl::StatusOr<PickleGraph> ReadPickle(absl::string_view bytes, const PickleLimits& limits, ObjectState objects) {
  return Machine(bytes, limits, objects).Run();
}

}  // namespace shardlight::sharded::checkpoint::pytorch
