"""gguf.py: a small GGUF v3 writer and reader (numpy only); ggml's block types are in quants.py.

File layout (little-endian throughout):
    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x (string key, u32 value_type, value)
    n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset)
    zero padding to general.alignment | tensor data (offsets relative to here, each aligned)
Strings are u64 length + UTF-8 bytes. Arrays are u32 element type + u64 count + elements.

ggml conventions: ne[0] is the innermost (contiguous) dimension. A weight matrix W of numpy shape
(rows=out, cols=in) is stored with ne = [cols, rows]; quantization blocks run along a row.

This module is independent of the C++ engine: it is the second opinion the tests compare against.
"""

import hashlib
import struct

import numpy as np

import quants

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32  # general.alignment when the key is absent (and the value we write)


class GGUFType:
    """Metadata value types, with the numbers stored in the file."""
    (UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64,
     FLOAT64) = range(13)


# struct format of each fixed-size scalar metadata type.
_SCALAR_FMT = {
    GGUFType.UINT8: "<B", GGUFType.INT8: "<b", GGUFType.UINT16: "<H", GGUFType.INT16: "<h",
    GGUFType.UINT32: "<I", GGUFType.INT32: "<i", GGUFType.FLOAT32: "<f", GGUFType.BOOL: "<?",
    GGUFType.UINT64: "<Q", GGUFType.INT64: "<q", GGUFType.FLOAT64: "<d",
}
# numpy dtype of the same types, for reading arrays in one go.
_SCALAR_DTYPE = {
    GGUFType.UINT8: "<u1", GGUFType.INT8: "<i1", GGUFType.UINT16: "<u2", GGUFType.INT16: "<i2",
    GGUFType.UINT32: "<u4", GGUFType.INT32: "<i4", GGUFType.FLOAT32: "<f4", GGUFType.BOOL: "<u1",
    GGUFType.UINT64: "<u8", GGUFType.INT64: "<i8", GGUFType.FLOAT64: "<f8",
}


# The ggml types, their block geometry, and the quantizers and dequantizers live in quants.py.
GGMLType = quants.GGMLType
QK4_0, QK8_0, QK_K = quants.QK4_0, quants.QK8_0, quants.QK_K
fp16_bits, fp16_value = quants.fp16_bits, quants.fp16_value
pack_q6_k, random_q6_k_blocks = quants.pack_q6_k, quants.random_q6_k_blocks


def type_nbytes(ggml_type, n_elements):
    """Bytes of n_elements of ggml_type (n_elements must fill whole blocks)."""
    block, nbytes = GGMLType.BLOCK[ggml_type]
    if n_elements % block:
        raise ValueError(f"{n_elements} elements is not a multiple of the "
                         f"{GGMLType.NAMES[ggml_type]} block size {block}")
    return n_elements // block * nbytes


def align_up(n, alignment):
    return (n + alignment - 1) // alignment * alignment


def encode_tensor(values, ggml_type):
    """float array (..., n) -> the bytes ggml stores for ggml_type (any type in quants.TYPES;
    quantized types use ggml's reference quantizers)."""
    if ggml_type not in quants.TYPES:
        raise ValueError(f"no quantizer for type {ggml_type}")
    return quants.quantize(np.asarray(values, dtype=np.float32), ggml_type).tobytes()


def decode_tensor(raw, ggml_type, ne):
    """Tensor bytes -> float32 numpy array in numpy order (shape reversed from ne)."""
    if ggml_type not in quants.TYPES:
        raise ValueError(f"no dequantizer for type {ggml_type}")
    raw = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, (bytes, bytearray)) else raw
    return quants.dequantize(raw, ggml_type).reshape(tuple(reversed(list(ne))))


# ---------------------------------------------------------------------------------------------
# Metadata values
# ---------------------------------------------------------------------------------------------

class Value:
    """A typed metadata value. For arrays, elem_type is the element type and value a list (or a
    list of Value for arrays of arrays)."""

    def __init__(self, vtype, value, elem_type=None):
        self.type = vtype
        self.value = value
        self.elem_type = elem_type

    def __repr__(self):
        return f"Value({self.type}, {self.value!r}, {self.elem_type})"


def _pack_string(s):
    data = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(data)) + data


def _pack_value(vtype, value, elem_type=None):
    if vtype == GGUFType.STRING:
        return _pack_string(value)
    if vtype == GGUFType.ARRAY:
        out = [struct.pack("<IQ", elem_type, len(value))]
        if elem_type == GGUFType.STRING:
            out.extend(_pack_string(s) for s in value)
        elif elem_type == GGUFType.ARRAY:
            for inner in value:
                out.append(_pack_value(GGUFType.ARRAY, inner.value, inner.elem_type))
        else:
            out.append(np.asarray(value).astype(_SCALAR_DTYPE[elem_type]).tobytes())
        return b"".join(out)
    return struct.pack(_SCALAR_FMT[vtype], value)


# ---------------------------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------------------------

class GGUFWriter:
    """Collects metadata and tensors, then writes the file in one pass.

    Tensor data is given either as bytes (already encoded) or as a callable returning an iterable
    of byte chunks, so multi-GB files can be streamed without holding them in memory.
    """

    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self.alignment = alignment
        self.kv = []        # (key, Value)
        self.tensors = []   # (name, ne, ggml_type, nbytes, data)
        self.add("general.alignment", GGUFType.UINT32, alignment)

    def add(self, key, vtype, value, elem_type=None):
        if any(k == key for k, _ in self.kv):
            raise ValueError(f"duplicate metadata key {key}")
        self.kv.append((key, Value(vtype, value, elem_type)))

    # Convenience setters for the common types.
    def add_string(self, key, value):
        self.add(key, GGUFType.STRING, value)

    def add_u32(self, key, value):
        self.add(key, GGUFType.UINT32, int(value))

    def add_i32(self, key, value):
        self.add(key, GGUFType.INT32, int(value))

    def add_f32(self, key, value):
        self.add(key, GGUFType.FLOAT32, float(value))

    def add_bool(self, key, value):
        self.add(key, GGUFType.BOOL, bool(value))

    def add_array(self, key, elem_type, values):
        self.add(key, GGUFType.ARRAY, list(values), elem_type)

    def add_tensor(self, name, array, ggml_type=GGMLType.F32):
        """array: float numpy array in numpy order (rows, cols); stored with ne = [cols, rows]."""
        array = np.asarray(array, dtype=np.float32)
        ne = list(reversed(array.shape))
        data = encode_tensor(array, ggml_type)
        self.add_raw_tensor(name, ne, ggml_type, data)

    def add_raw_tensor(self, name, ne, ggml_type, data, nbytes=None):
        """data: bytes, or a callable yielding byte chunks (then nbytes is computed from ne)."""
        n_elements = int(np.prod(ne, dtype=np.int64))
        expected = type_nbytes(ggml_type, n_elements)
        if ne[0] % GGMLType.BLOCK[ggml_type][0]:
            raise ValueError(f"{name}: ne[0]={ne[0]} is not a multiple of the block size")
        if not callable(data) and len(data) != expected:
            raise ValueError(f"{name}: {len(data)} bytes, expected {expected}")
        if any(t[0] == name for t in self.tensors):
            raise ValueError(f"duplicate tensor {name}")
        self.tensors.append((name, [int(v) for v in ne], ggml_type, expected, data))

    def _header(self):
        out = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))]
        for key, v in self.kv:
            out.append(_pack_string(key) + struct.pack("<I", v.type) +
                       _pack_value(v.type, v.value, v.elem_type))
        offset = 0
        for name, ne, ggml_type, nbytes, _ in self.tensors:
            out.append(_pack_string(name) + struct.pack("<I", len(ne)) +
                       struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ggml_type, offset))
            offset = align_up(offset + nbytes, self.alignment)
        header = b"".join(out)
        return header + b"\0" * (align_up(len(header), self.alignment) - len(header))

    def file_size(self):
        """Bytes the file will take (header, padding, every tensor), without writing it."""
        return len(self._header()) + sum(align_up(t[3], self.alignment) for t in self.tensors)

    def write(self, path):
        """Writes the file; returns its sha256 hex digest (computed while writing)."""
        digest = hashlib.sha256()
        with open(path, "wb") as f:
            def emit(chunk):
                f.write(chunk)
                digest.update(chunk)
            emit(self._header())
            for name, _, _, nbytes, data in self.tensors:
                written = 0
                chunks = data() if callable(data) else [data]
                for chunk in chunks:
                    emit(chunk)
                    written += len(chunk)
                if written != nbytes:
                    raise ValueError(f"{name}: wrote {written} bytes, expected {nbytes}")
                emit(b"\0" * (align_up(nbytes, self.alignment) - nbytes))
        return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------------------------

class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = ne
        self.type = ggml_type
        self.offset = offset
        self.nbytes = 0
        self.raw = None  # uint8 memmap slice of the data

    @property
    def shape(self):
        """numpy order: reversed ne."""
        return tuple(reversed(self.ne))


class GGUFReader:
    """Parses a GGUF file (v2/v3), memory-maps the data and checks every count against the size."""

    def __init__(self, path):
        self.path = str(path)
        self.mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        self.buf = memoryview(self.mm)
        self.size = len(self.mm)
        self.pos = 0
        if self._bytes(4) != GGUF_MAGIC:
            raise ValueError(f"{self.path}: not a GGUF file (bad magic)")
        self.version = self._scalar("<I")
        if self.version not in (2, 3):
            raise ValueError(f"{self.path}: unsupported GGUF version {self.version}")
        n_tensors, n_kv = self._scalar("<Q"), self._scalar("<Q")
        # Each kv needs >= 12 bytes, each tensor info >= 28: reject counts the file cannot hold.
        if n_kv * 12 + n_tensors * 28 > self.size:
            raise ValueError(f"{self.path}: n_kv={n_kv} n_tensors={n_tensors} exceed the file")
        self.fields = {}
        self.types = {}       # key -> GGUFType of the value
        self.elem_types = {}  # key -> element GGUFType, for arrays
        for _ in range(n_kv):
            key = self._string()
            vtype = self._scalar("<I")
            if key in self.fields:
                raise ValueError(f"{self.path}: duplicate key {key}")
            self.types[key] = vtype
            self.fields[key] = self._value(vtype, key)
        self.alignment = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise ValueError(f"{self.path}: general.alignment {self.alignment} is not a power of 2")
        self.tensors = {}
        order = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._scalar("<I")
            if not 1 <= n_dims <= 4:
                raise ValueError(f"{self.path}: tensor {name} has {n_dims} dimensions")
            ne = [self._scalar("<Q") for _ in range(n_dims)]
            ggml_type = self._scalar("<I")
            offset = self._scalar("<Q")
            if ggml_type not in GGMLType.BLOCK:
                raise ValueError(f"{self.path}: tensor {name} has unsupported type {ggml_type}")
            if name in self.tensors:
                raise ValueError(f"{self.path}: duplicate tensor {name}")
            info = TensorInfo(name, ne, ggml_type, offset)
            self.tensors[name] = info
            order.append(info)
        self.data_offset = align_up(self.pos, self.alignment)
        for info in order:
            n = 1
            for v in info.ne:
                n *= v
            info.nbytes = type_nbytes(info.type, n)
            start = self.data_offset + info.offset
            if info.offset % self.alignment or start + info.nbytes > self.size:
                raise ValueError(f"{self.path}: tensor {info.name} data lies outside the file")
            info.raw = self.mm[start:start + info.nbytes]
        self.tensor_order = [t.name for t in order]

    # -- low-level parsing ------------------------------------------------------------------
    def _bytes(self, n):
        if n < 0 or self.pos + n > self.size:
            raise ValueError(f"{self.path}: truncated at byte {self.pos} (need {n} more)")
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def _scalar(self, fmt):
        return struct.unpack(fmt, self._bytes(struct.calcsize(fmt)))[0]

    def _string(self):
        n = self._scalar("<Q")
        return self._bytes(n).decode("utf-8", errors="surrogateescape")

    def _value(self, vtype, key):
        if vtype == GGUFType.STRING:
            return self._string()
        if vtype == GGUFType.ARRAY:
            elem_type, values = self._array(key)
            self.elem_types[key] = elem_type
            return values
        if vtype in _SCALAR_FMT:
            return self._scalar(_SCALAR_FMT[vtype])
        raise ValueError(f"{self.path}: key {key} has bad value type {vtype}")

    def _array(self, key):
        """-> (element type, list). Arrays of arrays come back as lists of Value."""
        elem_type = self._scalar("<I")
        count = self._scalar("<Q")
        if count > self.size - self.pos:  # every element takes at least one byte
            raise ValueError(f"{self.path}: array {key} count {count} exceeds the file")
        if elem_type in _SCALAR_DTYPE:
            dtype = np.dtype(_SCALAR_DTYPE[elem_type])
            arr = np.frombuffer(self._bytes(count * dtype.itemsize), dtype=dtype)
            return elem_type, (arr.astype(bool).tolist() if elem_type == GGUFType.BOOL
                               else arr.tolist())
        if elem_type == GGUFType.STRING:
            return elem_type, [self._string() for _ in range(count)]
        if elem_type == GGUFType.ARRAY:
            inner = []
            for _ in range(count):
                inner_type, values = self._array(key)
                inner.append(Value(GGUFType.ARRAY, values, inner_type))
            return elem_type, inner
        raise ValueError(f"{self.path}: array {key} has bad element type {elem_type}")

    # -- access ------------------------------------------------------------------------------
    def get(self, key, default=None):
        return self.fields.get(key, default)

    def typed(self, key):
        """(type, value, elem_type) of a field, ready for GGUFWriter.add (to copy metadata)."""
        return self.types[key], self.fields[key], self.elem_types.get(key)

    def tensor(self, name):
        """Dequantized float32 numpy array (numpy order: rows, cols)."""
        info = self.tensors[name]
        return decode_tensor(info.raw, info.type, info.ne)
