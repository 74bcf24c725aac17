#!/usr/bin/env python3
"""A copy of a GGUF file whose tokenizer.chat_template is the given Jinja text (added or replaced); every
other key, the tensor table and the tensor data are copied byte for byte.

    gguf_with_template.py IN.gguf TEMPLATE.jinja OUT.gguf
"""
import struct
import sys

# GGUF value types: byte sizes of the fixed-size ones.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def skip_value(buf, pos, vtype):
    if vtype in FIXED:
        return pos + FIXED[vtype]
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == ARRAY:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in FIXED:
            return pos + FIXED[etype] * count
        for _ in range(count):
            pos = skip_value(buf, pos, etype)
        return pos
    raise ValueError(f"unknown GGUF value type {vtype} at byte {pos}")


def read_string(buf, pos):
    (n,) = struct.unpack_from("<Q", buf, pos)
    return buf[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n


def gguf_string(text):
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def with_template(buf, template):
    if buf[:4] != b"GGUF":
        raise ValueError("not a GGUF file (no GGUF magic)")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    pos = 24
    kvs = []
    alignment = 32
    for _ in range(n_kv):
        start = pos
        key, pos = read_string(buf, pos)
        (vtype,) = struct.unpack_from("<I", buf, pos)
        value_at = pos + 4
        pos = skip_value(buf, value_at, vtype)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, value_at)
        if key != "tokenizer.chat_template":
            kvs.append(buf[start:pos])
    kvs.append(gguf_string("tokenizer.chat_template") + struct.pack("<I", STRING) + gguf_string(template))
    infos_at = pos
    for _ in range(n_tensors):
        _, pos = read_string(buf, pos)
        (n_dims,) = struct.unpack_from("<I", buf, pos)
        pos += 4 + 8 * n_dims + 4 + 8
    infos = buf[infos_at:pos]
    data_at = (pos + alignment - 1) // alignment * alignment
    head = struct.pack("<4sIQQ", b"GGUF", version, n_tensors, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % alignment)
    return head + buf[data_at:]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        buf = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        template = f.read()
    with open(sys.argv[3], "wb") as f:
        f.write(with_template(buf, template))


if __name__ == "__main__":
    main()
