"""Builds fuzz seed corpora from the repo's fixtures and this machine's binaries.

Usage: python3 make_seeds.py FIXTURES_BUILD_DIR OUT_DIR
Writes OUT_DIR/<target>/<name> for every target; `cargo fuzz cmin` then keeps the
inputs that add coverage, which is what probe-user/fuzz/corpus/ holds.
"""
import os, struct, subprocess, sys, hashlib, lzma, glob as globmod

fixtures, out = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
MAX_SEED = 64 << 10  # bigger files make every fuzz iteration slow

def put(target, name, data):
    d = os.path.join(out, target); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)

def read(p):
    with open(p, 'rb') as f:
        return f.read()

def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True).stdout

def section(path, name):
    tmp = os.path.join(out, '.section.tmp')
    try:
        subprocess.run(['objcopy', '--dump-section', f'{name}={tmp}', path, os.devnull],
                       check=True, capture_output=True)
        # objcopy succeeds without writing anything when the section is absent.
        return read(tmp) if os.path.exists(tmp) else None
    except subprocess.CalledProcessError:
        return None
    finally:
        if os.path.exists(tmp): os.remove(tmp)

def text_end_and_base(path):
    end = 0
    for line in sh('readelf', '-lW', path).decode().splitlines():
        f = line.split()
        if f and f[0] == 'LOAD' and 'E' in f[6:-1]:
            end = max(end, int(f[2], 16) + int(f[4], 16))
    base = 0
    for line in sh('readelf', '-SW', path).decode().splitlines():
        if '.stapsdt.base' in line:
            f = line.split(']')[1].split()
            base = int(f[2], 16)
    return end, base

def notes(blob):
    """Splits a note section into whole notes (4-byte aligned, 64-bit ELF)."""
    i = 0
    while i + 12 <= len(blob):
        namesz, descsz, _ = struct.unpack_from('<III', blob, i)
        n = 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
        yield blob[i:i + n]
        i += n

def tag(p):
    return os.path.relpath(p, '/').replace('/', '_')

# Files: fixtures (the large Go and Rust ones are left out) and small system ones.
elf_files = sorted(globmod.glob(f'{fixtures}/c/*') + [f'{fixtures}/cpp/cppfix',
    f'{fixtures}/python/libpyprobes.so', '/usr/bin/true',
    '/usr/lib/x86_64-linux-gnu/libpthread.so.0'])
note_files = elf_files + ['/usr/lib/x86_64-linux-gnu/libstdc++.so.6', '/usr/bin/python3.11'] \
    + sorted(globmod.glob('/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so'))
note_files = [p for p in note_files if os.path.isfile(p)]

# elf_image: whole small files, plus synthetic ones of every class and byte order.
for p in elf_files:
    if os.path.isfile(p) and len(read(p)) <= MAX_SEED:
        put('elf_image', tag(p), read(p))
subprocess.run([sys.executable, os.path.join(here, 'mkelf.py'), os.path.join(out, 'elf_image')],
               check=True)

# usdt_notes: header (flags, text end, .stapsdt.base) + the .note.stapsdt section, in
# groups of at most 16 notes.
args = set()
for p in note_files:
    blob = section(p, '.note.stapsdt')
    if not blob:
        continue
    end, base = text_end_and_base(p)
    header = bytes([1 | 4 | 8]) + struct.pack('<QQ', end, base)
    ns = list(notes(blob))
    for k in range(0, len(ns), 16):
        put('usdt_notes', f'{tag(p)}-{k // 16}', header + b''.join(ns[k:k + 16]))
    for n in ns:
        namesz, descsz, _ = struct.unpack_from('<III', n, 0)
        desc = n[12 + (namesz + 3) // 4 * 4:][:descsz]
        parts = desc[24:].split(b'\0')
        if len(parts) >= 3:
            args.add(parts[2])
# 32-bit and big-endian wrappings of one note group each.
first = sorted(os.listdir(os.path.join(out, 'usdt_notes')))[0]
blob = read(os.path.join(out, 'usdt_notes', first))
put('usdt_notes', 'elf32-be', bytes([2 | 4 | 8]) + blob[1:])

# usdt_args: every distinct argument string.
for a in sorted(args):
    put('usdt_args', hashlib.sha1(a).hexdigest()[:16], a)
for a in [b'-4@%edi 8@-16(%rbp) 8@counter(%rip) 4@$7', b'8@sym+16(%rip) -2@%ah 1@(%rax,%rdx,8)',
          b'8@-0x10(%r12,%r13,2) 4@0x601040 -8@$-9223372036854775808', b'4@%r8d 2@%r10w 1@%r15b']:
    put('usdt_args', hashlib.sha1(a).hexdigest()[:16], a)

# probe_spec: the forms the docs and tests use.
for s in ['uprobe:work_unit', 'uretprobe:leaf_ret', 'u:main', 'ur:libc:malloc',
          'uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc', 'uprobe:std::vector<int>::push_back*',
          'usdt:probes:work_start', 'U:/opt/app/bin:prov:name', 'usdt:libstdcxx:throw',
          'usdt:/usr/lib/x86_64-linux-gnu/libstdc++.so.6:libstdcxx:catch', 'uprobe:work_[a-c]?*',
          '  uprobe:lib.so:f  ', 'usdt:a:b:c:d', 'kprobe:x', 'uprobe:', 'uprobe:not_lib:f',
          'uprobe:_ZN2ns3maxIiEET_S1_S1_', 'uprobe:[!x]*']:
    put('probe_spec', hashlib.sha1(s.encode()).hexdigest()[:16], s.encode())

# minidebuginfo: the fixture's .gnu_debugdata, and small ELF files packed as
# MiniDebugInfo is (xz), with each integrity check and a few presets.
dd = section(f'{fixtures}/c/probes-minidebug', '.gnu_debugdata')
if dd:
    put('minidebuginfo', 'probes-minidebug.gnu_debugdata', dd)
small = read(f'{fixtures}/c/probes-debuglink.debug')
for check in (lzma.CHECK_NONE, lzma.CHECK_CRC32, lzma.CHECK_CRC64, lzma.CHECK_SHA256):
    put('minidebuginfo', f'debug-check{check}.xz', lzma.compress(small, check=check))
for preset in (0, 6, 9 | lzma.PRESET_EXTREME):
    put('minidebuginfo', f'debug-preset{preset}.xz', lzma.compress(small, preset=preset))
put('minidebuginfo', 'two-streams.xz', lzma.compress(b'abc') + lzma.compress(small[:4096]))
put('minidebuginfo', 'x86-filter.xz', lzma.compress(small, filters=[{'id': lzma.FILTER_X86}, {'id': lzma.FILTER_LZMA2}]))

# demangle: mangled C++ and Rust (legacy and v0) names from fixtures and libstdc++.
names = set()
for p in [f'{fixtures}/cpp/cppfix', f'{fixtures}/rust/rustfix-legacy', f'{fixtures}/rust/rustfix-v0',
          '/usr/lib/x86_64-linux-gnu/libstdc++.so.6']:
    if not os.path.isfile(p):
        continue
    for line in sh('nm', '-D' if p.endswith('.6') else '-a', p).decode(errors='replace').splitlines():
        name = line.split()[-1] if line.split() else ''
        if name.startswith(('_Z', '_R')):
            names.add(name.split('@')[0])
# A deterministic sample: the corpus keeps what adds coverage anyway.
for n in sorted(names, key=lambda n: hashlib.sha1(n.encode()).digest())[:2000]:
    put('demangle', hashlib.sha1(n.encode()).hexdigest()[:16], n.encode())
