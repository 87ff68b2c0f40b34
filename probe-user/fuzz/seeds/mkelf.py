"""Writes small ELF files of every class and byte order for the elf_image seeds:
two PT_LOADs, .symtab/.strtab, .dynsym/.dynstr, .note.stapsdt (+ .stapsdt.base),
a build-id note and .gnu_debuglink."""
import struct, sys, zlib

def build(is64, be, machine=62):
    e = '>' if be else '<'
    A = 'Q' if is64 else 'I'
    text_va, text_off, text_sz = 0x1000, 0x1000, 0x100
    data_va, data_off = 0x3000, 0x1100
    # contents
    strtab = b'\0'
    def s(name):
        nonlocal strtab
        off = len(strtab); strtab += name + b'\0'; return off
    syms = [(b'main', 0x1000, 0x10, 2, 1), (b'_Z9work_uniti', 0x1010, 0x20, 2, 1),
            (b'_ZN7rustfix8trace_me17h0123456789abcdefE', 0x1030, 8, 2, 1),
            (b'local_fn', 0x1040, 8, 2, 0), (b'weak_alias', 0x1010, 0x20, 2, 2),
            (b'counter', 0x3000, 4, 1, 1), (b'ifunc', 0x1050, 4, 10, 1)]
    symrecs = []
    for name, va, size, typ, bind in syms:
        symrecs.append((s(name), va, size, (bind << 4) | typ, 1 if va < 0x3000 else 2))
    def sym(rec):
        n, va, size, info, shndx = rec
        if is64: return struct.pack(e+'IBBHQQ', n, info, 0, shndx, va, size)
        return struct.pack(e+'IIIBBH', n, va, size, info, 0, shndx)
    symsz = 24 if is64 else 16
    symtab = b'\0' * symsz + b''.join(sym(r) for r in symrecs)
    def note(name, typ, desc):
        n = name + b'\0'
        pad = lambda b: b + b'\0' * (-len(b) % 4)
        return struct.pack(e+'III', len(n), len(desc), typ) + pad(n) + pad(desc)
    def addr(v): return struct.pack(e+A, v)
    sdt = note(b'stapsdt', 3, addr(0x1014) + addr(0x1080) + addr(0x3004) +
               b'prov\0probe1\0-4@%edi 8@-16(%rbp) 8@counter(%rip) 4@$7\0')
    sdt += note(b'stapsdt', 3, addr(0x1034) + addr(0x1080) + addr(0) + b'prov\0noargs\0\0')
    bid = note(b'GNU', 3, bytes(range(20)))
    dl = b'x.debug\0' + struct.pack(e+'I', 0x12345678)
    shstr = b'\0'
    def sn(name):
        nonlocal shstr
        off = len(shstr); shstr += name + b'\0'; return off
    # layout: header, phdrs, then sections appended
    ehsz = 64 if is64 else 52
    phsz = 56 if is64 else 32
    shsz = 64 if is64 else 40
    body = bytearray(b'\0' * 0x1000)  # up to text
    body += b'\x90' * 0x100           # .text at 0x1000
    body += b'\0' * 8                 # .data at 0x1100
    secs = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]  # null
    def add(name, typ, flags, va, content, link=0, info=0, align=1, entsize=0):
        nonlocal body
        while len(body) % max(align, 1): body += b'\0'
        off = len(body); body += content
        secs.append((sn(name), typ, flags, va, off, len(content), link, info, align, entsize))
    secs.append((sn(b'.text'), 1, 6, text_va, text_off, text_sz, 0, 0, 16, 0))
    secs.append((sn(b'.data'), 1, 3, data_va, data_off, 8, 0, 0, 8, 0))
    add(b'.note.stapsdt', 7, 0, 0, sdt, align=4)
    add(b'.stapsdt.base', 1, 2, 0x1080, b'\0')
    add(b'.note.gnu.build-id', 7, 2, 0, bid, align=4)
    add(b'.gnu_debuglink', 1, 0, 0, dl, align=4)
    strtab_idx = len(secs) + 1
    add(b'.symtab', 2, 0, 0, symtab, link=strtab_idx, info=1, align=8, entsize=symsz)
    add(b'.strtab', 3, 0, 0, strtab)
    dynstr_idx = len(secs) + 1
    add(b'.dynsym', 11, 2, 0, b'\0' * symsz + sym(symrecs[0]), link=dynstr_idx, info=1, align=8, entsize=symsz)
    add(b'.dynstr', 3, 2, 0, strtab)
    shstrndx = len(secs)
    name_off = sn(b'.shstrtab')
    secs.append((name_off, 3, 0, 0, 0, 0, 0, 0, 1, 0))
    so = len(body); body += shstr
    secs[-1] = (name_off, 3, 0, 0, so, len(shstr), 0, 0, 1, 0)
    while len(body) % 8: body += b'\0'
    shoff = len(body)
    for (n, t, f, va, off, size, link, info, al, es) in secs:
        if is64: body += struct.pack(e+'IIQQQQIIQQ', n, t, f, va, off, size, link, info, al, es)
        else: body += struct.pack(e+'IIIIIIIIII', n, t, f, va, off, size, link, info, al, es)
    # header + phdrs
    ident = b'\x7fELF' + bytes([2 if is64 else 1, 2 if be else 1, 1, 0]) + b'\0' * 8
    if is64:
        hdr = ident + struct.pack(e+'HHIQQQIHHHHHH', 3, machine, 1, 0x1000, ehsz, shoff, 0, ehsz, phsz, 2, shsz, len(secs), shstrndx)
        ph = struct.pack(e+'IIQQQQQQ', 1, 5, 0, 0, 0, 0x1100, 0x1100, 0x1000)
        ph += struct.pack(e+'IIQQQQQQ', 1, 6, data_off, data_va, data_va, 8, 0x10, 0x1000)
    else:
        hdr = ident + struct.pack(e+'HHIIIIIHHHHHH', 3, machine, 1, 0x1000, ehsz, shoff, 0, ehsz, phsz, 2, shsz, len(secs), shstrndx)
        ph = struct.pack(e+'IIIIIIII', 1, 0, 0, 0, 0x1100, 0x1100, 5, 0x1000)
        ph += struct.pack(e+'IIIIIIII', 1, data_off, data_va, data_va, 8, 0x10, 6, 0x1000)
    body[0:len(hdr) + len(ph)] = hdr + ph
    return bytes(body)

out = sys.argv[1]
for is64 in (True, False):
    for be in (False, True):
        with open(f'{out}/synthetic-elf{64 if is64 else 32}-{"be" if be else "le"}', 'wb') as f:
            f.write(build(is64, be))
