#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""rrfuzz: seeded fuzzed-image test for rrfuse.

Builds a few small ext4 template images once per run, then for every case
copies a template, corrupts one on-disk structure (superblock, group
descriptor, bitmap, inode, extent block, directory block, xattr block),
optionally re-fixes the metadata checksums so that the corruption gets past
the checksum layer, mounts the image with rrfuse, walks and modifies the tree
in a child process under a timeout, unmounts, and requires the daemon to exit
by itself with status 0 or 1 and without a sanitizer report.

Python 3 standard library only.  Needs root, /dev/fuse, mke2fs, debugfs,
e2fsck, fusermount3 (and gdb, optionally, for backtraces of hung daemons).
See README.md next to this file.
"""

import argparse
import hashlib
import concurrent.futures
import os
import random
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_RRFUSE = os.path.join(REPO, "build-dev", "rrfuse")

MOUNT_TIMEOUT = 10.0     # daemon start until the mount shows up
WALK_TIMEOUT = 20.0      # the whole walk + writes in the child
EXIT_TIMEOUT = 20.0      # daemon exit after the unmount (LSan needs a moment)

SANITIZER_PATTERNS = ("ERROR: AddressSanitizer", "runtime error:",
                      "LeakSanitizer", "ERROR: UndefinedBehaviorSanitizer",
                      "ThreadSanitizer")


# ----------------------------------------------------------------------------
# checksums

def _mk_crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


def _mk_crc16_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xA001 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC32C = _mk_crc32c_table()
_CRC16 = _mk_crc16_table()


def crc32c(crc, data):
    """ext2fs_crc32c_le(): no pre/post inversion (callers pass ~0 as seed)."""
    t = _CRC32C
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def crc16(crc, data):
    t = _CRC16
    for b in data:
        crc = ((crc >> 8) & 0xFF) ^ t[(crc ^ b) & 0xFF]
    return crc & 0xFFFF


def u8(b, o):
    return b[o]


def u16(b, o):
    return struct.unpack_from("<H", b, o)[0]


def u32(b, o):
    return struct.unpack_from("<I", b, o)[0]


def p16(b, o, v):
    struct.pack_into("<H", b, o, v & 0xFFFF)


def p32(b, o, v):
    struct.pack_into("<I", b, o, v & 0xFFFFFFFF)


def getint(b, o, size):
    return int.from_bytes(b[o:o + size], "little")


def putint(b, o, size, v):
    b[o:o + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


# ----------------------------------------------------------------------------
# on-disk format

RO_COMPAT_GDT_CSUM = 0x10
RO_COMPAT_METADATA_CSUM = 0x400
INCOMPAT_64BIT = 0x80
INCOMPAT_CSUM_SEED = 0x2000
EXTENTS_FL = 0x80000
INDEX_FL = 0x1000

SB_FIELDS = [
    ("s_inodes_count", 0x0, 4, "int"), ("s_blocks_count_lo", 0x4, 4, "int"),
    ("s_r_blocks_count_lo", 0x8, 4, "int"), ("s_free_blocks_count_lo", 0xC, 4, "int"),
    ("s_free_inodes_count", 0x10, 4, "int"), ("s_first_data_block", 0x14, 4, "int"),
    ("s_log_block_size", 0x18, 4, "small"), ("s_log_cluster_size", 0x1C, 4, "small"),
    ("s_blocks_per_group", 0x20, 4, "int"), ("s_clusters_per_group", 0x24, 4, "int"),
    ("s_inodes_per_group", 0x28, 4, "int"), ("s_mnt_count", 0x34, 2, "int"),
    ("s_magic", 0x38, 2, "int"), ("s_state", 0x3A, 2, "flags"),
    ("s_errors", 0x3C, 2, "small"), ("s_minor_rev_level", 0x3E, 2, "int"),
    ("s_creator_os", 0x48, 4, "small"), ("s_rev_level", 0x4C, 4, "small"),
    ("s_first_ino", 0x54, 4, "int"), ("s_inode_size", 0x58, 2, "int"),
    ("s_block_group_nr", 0x5A, 2, "int"), ("s_feature_compat", 0x5C, 4, "flags"),
    ("s_feature_incompat", 0x60, 4, "flags"), ("s_feature_ro_compat", 0x64, 4, "flags"),
    ("s_uuid", 0x68, 16, "bytes"), ("s_reserved_gdt_blocks", 0xCE, 2, "int"),
    ("s_journal_inum", 0xE0, 4, "ino"), ("s_last_orphan", 0xE8, 4, "ino"),
    ("s_hash_seed", 0xEC, 16, "bytes"), ("s_def_hash_version", 0xFC, 1, "small"),
    ("s_desc_size", 0xFE, 2, "int"), ("s_default_mount_opts", 0x100, 4, "flags"),
    ("s_first_meta_bg", 0x104, 4, "int"), ("s_blocks_count_hi", 0x150, 4, "int"),
    ("s_r_blocks_count_hi", 0x154, 4, "int"), ("s_free_blocks_hi", 0x158, 4, "int"),
    ("s_min_extra_isize", 0x15C, 2, "int"), ("s_want_extra_isize", 0x15E, 2, "int"),
    ("s_flags", 0x160, 4, "flags"), ("s_mmp_interval", 0x166, 2, "int"),
    ("s_mmp_block", 0x168, 8, "blk"), ("s_log_groups_per_flex", 0x174, 1, "small"),
    ("s_checksum_type", 0x175, 1, "small"), ("s_usr_quota_inum", 0x240, 4, "ino"),
    ("s_grp_quota_inum", 0x244, 4, "ino"), ("s_overhead_clusters", 0x248, 4, "int"),
    ("s_backup_bgs", 0x24C, 8, "blk"), ("s_lpf_ino", 0x268, 4, "ino"),
    ("s_prj_quota_inum", 0x26C, 4, "ino"), ("s_checksum_seed", 0x270, 4, "int"),
    ("s_encoding", 0x27C, 2, "small"), ("s_encoding_flags", 0x27E, 2, "flags"),
    ("s_orphan_file_inum", 0x280, 4, "ino"), ("s_checksum", 0x3FC, 4, "int"),
]

GD_FIELDS32 = [
    ("bg_block_bitmap_lo", 0x0, 4, "blk"), ("bg_inode_bitmap_lo", 0x4, 4, "blk"),
    ("bg_inode_table_lo", 0x8, 4, "blk"), ("bg_free_blocks_count_lo", 0xC, 2, "int"),
    ("bg_free_inodes_count_lo", 0xE, 2, "int"), ("bg_used_dirs_count_lo", 0x10, 2, "int"),
    ("bg_flags", 0x12, 2, "gdflags"), ("bg_exclude_bitmap_lo", 0x14, 4, "blk"),
    ("bg_block_bitmap_csum_lo", 0x18, 2, "int"), ("bg_inode_bitmap_csum_lo", 0x1A, 2, "int"),
    ("bg_itable_unused_lo", 0x1C, 2, "int"), ("bg_checksum", 0x1E, 2, "int"),
]
GD_FIELDS64 = GD_FIELDS32 + [
    ("bg_block_bitmap_hi", 0x20, 4, "int"), ("bg_inode_bitmap_hi", 0x24, 4, "int"),
    ("bg_inode_table_hi", 0x28, 4, "int"), ("bg_free_blocks_count_hi", 0x2C, 2, "int"),
    ("bg_free_inodes_count_hi", 0x2E, 2, "int"), ("bg_used_dirs_count_hi", 0x30, 2, "int"),
    ("bg_itable_unused_hi", 0x32, 2, "int"), ("bg_block_bitmap_csum_hi", 0x38, 2, "int"),
    ("bg_inode_bitmap_csum_hi", 0x3A, 2, "int"),
]

INODE_FIELDS = [
    ("i_mode", 0x0, 2, "mode"), ("i_uid", 0x2, 2, "int"), ("i_size_lo", 0x4, 4, "size"),
    ("i_dtime", 0x14, 4, "int"), ("i_links_count", 0x1A, 2, "int"),
    ("i_blocks_lo", 0x1C, 4, "int"), ("i_flags", 0x20, 4, "iflags"),
    ("i_block", 0x28, 60, "bytes"), ("i_generation", 0x64, 4, "int"),
    ("i_file_acl_lo", 0x68, 4, "blk"), ("i_size_high", 0x6C, 4, "int"),
    ("i_blocks_high", 0x74, 2, "int"), ("i_file_acl_high", 0x76, 2, "int"),
    ("i_checksum_lo", 0x7C, 2, "int"), ("i_extra_isize", 0x80, 2, "int"),
    ("i_checksum_hi", 0x82, 2, "int"), ("i_ctime_extra", 0x84, 4, "int"),
    ("i_mtime_extra", 0x88, 4, "int"),
]
# The extent header / entries inside i_block (offsets relative to the inode).
IBLOCK_EXT_FIELDS = [
    ("eh_magic", 0x28, 2, "int"), ("eh_entries", 0x2A, 2, "int"),
    ("eh_max", 0x2C, 2, "int"), ("eh_depth", 0x2E, 2, "int"),
]
for _i in range(4):
    _o = 0x28 + 12 + 12 * _i
    IBLOCK_EXT_FIELDS += [("ext[%d].ee_block" % _i, _o, 4, "int"),
                          ("ext[%d].ee_len/ei_leaf_lo" % _i, _o + 4, 2, "int"),
                          ("ext[%d].ee_start_hi" % _i, _o + 6, 2, "int"),
                          ("ext[%d].ee_start_lo/ei_leaf" % _i, _o + 8, 4, "blk"),
                          ("ext[%d].ei_leaf_lo" % _i, _o + 4, 4, "blk")]

INODE_FIELD_WEIGHT = {"i_mode": 3, "i_size_lo": 3, "i_links_count": 2, "i_flags": 4, "i_block": 2,
                      "i_file_acl_lo": 3, "i_size_high": 2, "i_extra_isize": 3, "i_blocks_lo": 2}
TYPE_NAMES = {0x1000: "fifo", 0x2000: "chr", 0x4000: "dir", 0x6000: "blk", 0x8000: "reg",
              0xA000: "symlink", 0xC000: "sock"}
IFLAG_BITS = [0x10, 0x20, 0x800, 0x1000, 0x4000, 0x40000, 0x80000, 0x200000,
              0x10000000, 0x20000000, 0x40000000, 0x100000, 0x2000000, 0x400000,
              0x80, 0x1, 0x8]
MODE_TYPES = [0x1000, 0x2000, 0x4000, 0x6000, 0x8000, 0xA000, 0xC000, 0x0000,
              0xE000, 0xF000]


class FS:
    """Just enough of an ext4 parser to find where the structures are."""

    def __init__(self, img):
        self.img = img
        sb = img[1024:2048]
        self.sb = sb
        self.bs = 1024 << u32(sb, 0x18)
        self.blocks_count = u32(sb, 0x4) | (u32(sb, 0x150) << 32 if u32(sb, 0x60) & INCOMPAT_64BIT else 0)
        self.fdb = u32(sb, 0x14)
        self.bpg = u32(sb, 0x20)
        self.cpg = u32(sb, 0x24)
        self.ipg = u32(sb, 0x28)
        self.inode_size = u16(sb, 0x58)
        self.incompat = u32(sb, 0x60)
        self.ro_compat = u32(sb, 0x64)
        self.is64 = bool(self.incompat & INCOMPAT_64BIT)
        self.desc_size = u16(sb, 0xFE) if self.is64 else 32
        self.ngroups = (self.blocks_count - self.fdb + self.bpg - 1) // self.bpg
        self.gdt_off = (self.fdb + 1) * self.bs
        self.csum = bool(self.ro_compat & RO_COMPAT_METADATA_CSUM)
        self.gdt_csum = bool(self.ro_compat & RO_COMPAT_GDT_CSUM)
        self.uuid = bytes(sb[0x68:0x78])
        if self.incompat & INCOMPAT_CSUM_SEED:
            self.seed = u32(sb, 0x270)
        else:
            self.seed = crc32c(0xFFFFFFFF, self.uuid)

    def gd_off(self, g):
        return self.gdt_off + g * self.desc_size

    def gd_field(self, g, lo, hi, size=4):
        o = self.gd_off(g)
        v = getint(self.img, o + lo, size)
        if self.desc_size >= 64 and hi is not None:
            v |= getint(self.img, o + hi, size) << (8 * size)
        return v

    def block_bitmap(self, g):
        return self.gd_field(g, 0x0, 0x20)

    def inode_bitmap(self, g):
        return self.gd_field(g, 0x4, 0x24)

    def inode_table(self, g):
        return self.gd_field(g, 0x8, 0x28)

    def inode_off(self, ino):
        g, i = divmod(ino - 1, self.ipg)
        return self.inode_table(g) * self.bs + i * self.inode_size

    def inode(self, ino):
        o = self.inode_off(ino)
        return self.img[o:o + self.inode_size]

    def block(self, b):
        return self.img[b * self.bs:(b + 1) * self.bs]

    # extent tree: returns ([(lblk, pblk, len)], [(tree_block, depth)])
    def extents(self, ino):
        ib = self.inode(ino)
        maps, tree = [], []
        if not u32(ib, 0x20) & EXTENTS_FL:
            return maps, tree
        self._ext_node(ib[0x28:0x28 + 60], maps, tree, 0)
        return maps, tree

    def _ext_node(self, buf, maps, tree, lvl):
        if u16(buf, 0) != 0xF30A or lvl > 5:
            return
        n, depth = u16(buf, 2), u16(buf, 6)
        for i in range(n):
            o = 12 + 12 * i
            if o + 12 > len(buf):
                break
            if depth == 0:
                lb, ln, hi, lo = struct.unpack_from("<IHHI", buf, o)
                if ln > 32768:
                    ln -= 32768
                maps.append((lb, (hi << 32) | lo, ln))
            else:
                lb, lo, hi = struct.unpack_from("<IIH", buf, o)
                child = (hi << 32) | lo
                if child >= self.blocks_count:
                    continue
                tree.append((child, depth - 1))
                self._ext_node(self.block(child), maps, tree, lvl + 1)

    def has_blocks(self, ino):
        """Whether i_block holds a block map / extent tree (not a fast symlink, device...)."""
        ib = self.inode(ino)
        typ = u16(ib, 0) & 0xF000
        if typ in (0x8000, 0x4000):
            return True
        if typ == 0xA000:
            size = u32(ib, 4)
            return size >= 60 or (u32(ib, 0x20) & EXTENTS_FL) != 0
        return False

    def blockmap(self, ino):
        """Old-style (ext2/3) block map: ([(lblk, pblk, 1)], [(indirect block, level)])."""
        ib = self.inode(ino)
        maps, ind = [], []
        if u32(ib, 0x20) & EXTENTS_FL or not self.has_blocks(ino):
            return maps, ind
        ptrs = struct.unpack_from("<15I", ib, 0x28)
        per = self.bs // 4
        for i in range(12):
            if ptrs[i]:
                maps.append((i, ptrs[i], 1))

        def walk(blk, level, base):
            if not blk or blk >= self.blocks_count or len(ind) > 64:
                return
            ind.append((blk, level))
            b = self.block(blk)
            span = per ** (level - 1)
            for k in range(per):
                q = u32(b, 4 * k)
                if not q:
                    continue
                if level == 1:
                    maps.append((base + k, q, 1))
                else:
                    walk(q, level - 1, base + k * span)
        walk(ptrs[12], 1, 12)
        walk(ptrs[13], 2, 12 + per)
        walk(ptrs[14], 3, 12 + per + per * per)
        return maps, ind

    def file_blocks(self, ino):
        maps, _ = self.extents(ino)
        if not maps:
            maps, _ = self.blockmap(ino)
        out = []
        for lb, pb, ln in maps:
            for k in range(ln):
                out.append((lb + k, pb + k))
        return out

    def dirents(self, blk):
        b = self.block(blk)
        o, out = 0, []
        while o + 8 <= self.bs:
            ino, rl, nl, ft = struct.unpack_from("<IHBB", b, o)
            if rl < 8 or o + rl > self.bs:
                break
            if ino:
                out.append((o, ino, bytes(b[o + 8:o + 8 + nl]), ft))
            o += rl
        return out


# ----------------------------------------------------------------------------
# checksum re-fixing (metadata_csum and gdt_csum)

def inode_seed(fs, img, ino):
    gen = u32(img, fs.inode_off(ino) + 0x64)
    c = crc32c(fs.seed, struct.pack("<I", ino))
    return crc32c(c, struct.pack("<I", gen))


def csum_sb(fs, img, store):
    c = crc32c(0xFFFFFFFF, img[1024:1024 + 0x3FC])
    if store:
        p32(img, 1024 + 0x3FC, c)
    return c == u32(img, 1024 + 0x3FC)


def csum_gd(fs, img, g, store):
    o = fs.gd_off(g)
    d = bytearray(img[o:o + fs.desc_size])
    old = u16(d, 0x1E)
    if fs.csum:
        p16(d, 0x1E, 0)
        c = crc32c(crc32c(fs.seed, struct.pack("<I", g)), d) & 0xFFFF
    elif fs.gdt_csum:
        c = crc16(0xFFFF, fs.uuid)
        c = crc16(c, struct.pack("<I", g))
        c = crc16(c, d[:0x1E])
        if fs.desc_size > 0x20:
            c = crc16(c, d[0x20:])
    else:
        return True
    if store:
        p16(img, o + 0x1E, c)
    return c == old


def csum_bitmap(fs, img, g, which, store):
    if not fs.csum:
        return True
    if which == "b":
        blk, n, lo, hi = fs.block_bitmap(g), fs.cpg // 8, 0x18, 0x38
    else:
        blk, n, lo, hi = fs.inode_bitmap(g), fs.ipg // 8, 0x1A, 0x3A
    c = crc32c(fs.seed, img[blk * fs.bs:blk * fs.bs + n])
    o = fs.gd_off(g)
    ok = (c & 0xFFFF) == u16(img, o + lo)
    if fs.desc_size >= 0x3C:
        ok = ok and (c >> 16) == u16(img, o + hi)
    if store:
        p16(img, o + lo, c & 0xFFFF)
        if fs.desc_size >= 0x3C:
            p16(img, o + hi, c >> 16)
        csum_gd(fs, img, g, True)
    return ok


def csum_inode(fs, img, ino, store):
    if not fs.csum:
        return True
    o = fs.inode_off(ino)
    d = bytearray(img[o:o + fs.inode_size])
    has_hi = fs.inode_size > 128 and u16(d, 0x80) >= 4
    old = u16(d, 0x7C) | ((u16(d, 0x82) << 16) if has_hi else 0)
    p16(d, 0x7C, 0)
    if has_hi:
        p16(d, 0x82, 0)
    c = crc32c(fs.seed, struct.pack("<I", ino))
    c = crc32c(c, d[0x64:0x68])
    c = crc32c(c, d)
    if not has_hi:
        c &= 0xFFFF
    if store:
        p16(img, o + 0x7C, c & 0xFFFF)
        if has_hi:
            p16(img, o + 0x82, c >> 16)
    return c == old


def csum_extent(fs, img, blk, owner, store):
    if not fs.csum:
        return True
    o = blk * fs.bs
    emax = u16(img, o + 4)
    tail = 12 + 12 * emax
    if tail + 4 > fs.bs:
        return None
    c = crc32c(inode_seed(fs, img, owner), img[o:o + tail])
    if store:
        p32(img, o + tail, c)
    return c == u32(img, o + tail)


def csum_dirleaf(fs, img, blk, owner, store):
    if not fs.csum:
        return True
    o = blk * fs.bs
    c = crc32c(inode_seed(fs, img, owner), img[o:o + fs.bs - 12])
    if store:
        p32(img, o + fs.bs - 4, c)
    return c == u32(img, o + fs.bs - 4)


def csum_dx(fs, img, blk, owner, count_off, store):
    if not fs.csum:
        return True
    o = blk * fs.bs
    limit, count = u16(img, o + count_off), u16(img, o + count_off + 2)
    tail = count_off + 8 * limit
    if tail + 8 > fs.bs or count > limit:
        return None
    c = crc32c(inode_seed(fs, img, owner), img[o:o + count_off + 8 * count])
    c = crc32c(c, bytes(img[o + tail:o + tail + 4]) + b"\0\0\0\0")
    if store:
        p32(img, o + tail + 4, c)
    return c == u32(img, o + tail + 4)


def csum_xattr(fs, img, blk, store):
    if not fs.csum:
        return True
    o = blk * fs.bs
    d = bytearray(img[o:o + fs.bs])
    old = u32(d, 0x10)
    p32(d, 0x10, 0)
    c = crc32c(crc32c(fs.seed, struct.pack("<Q", blk)), d)
    if store:
        p32(img, o + 0x10, c)
    return c == old


def refix(fs, img, spec, store=True):
    if spec is None:
        return True
    kind = spec[0]
    if kind == "sb":
        return csum_sb(fs, img, store) if fs.csum else True
    if kind == "gd":
        return csum_gd(fs, img, spec[1], store)
    if kind == "bbitmap":
        return csum_bitmap(fs, img, spec[1], "b", store)
    if kind == "ibitmap":
        return csum_bitmap(fs, img, spec[1], "i", store)
    if kind == "inode":
        return csum_inode(fs, img, spec[1], store)
    if kind == "extent":
        return csum_extent(fs, img, spec[1], spec[2], store)
    if kind == "dirleaf":
        return csum_dirleaf(fs, img, spec[1], spec[2], store)
    if kind == "dx":
        return csum_dx(fs, img, spec[1], spec[2], spec[3], store)
    if kind == "xattr":
        return csum_xattr(fs, img, spec[1], store)
    raise ValueError(kind)


# ----------------------------------------------------------------------------
# templates

TEMPLATES = [
    # name, size MiB, mke2fs args
    ("4k-csum", 16, ["-b", "4096", "-g", "1024", "-N", "1024"]),
    ("1k-csum", 16, ["-b", "1024", "-N", "2048"]),
    ("4k-nocsum", 16, ["-b", "4096", "-g", "2048", "-O", "^metadata_csum,uninit_bg", "-N", "1024"]),
    ("1k-nocsum-noflex", 16, ["-b", "1024", "-O", "^metadata_csum,^flex_bg,^64bit", "-N", "2048"]),
    ("1k-ext3", 16, ["-t", "ext3", "-b", "1024", "-I", "256", "-N", "2048"]),
]


def _run(cmd, ok=(0,), **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    if r.returncode not in ok:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode,
                                                    r.stdout.decode("utf-8", "replace")))
    return r


def build_template(workdir, name, size_mib, args):
    rng = random.Random("template:" + name)
    d = os.path.join(workdir, "tmpl-" + name)
    os.makedirs(d, exist_ok=True)
    img = os.path.join(d, "image")
    env = dict(os.environ, E2FSPROGS_FAKE_TIME="1700000000", MKE2FS_CONFIG="/etc/mke2fs.conf")
    with open(img, "wb") as f:
        f.truncate(size_mib << 20)
    h = hashlib.md5(name.encode()).hexdigest()
    uuid = "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])
    _run(["mke2fs", "-q", "-F"] + ([] if "-t" in args else ["-t", "ext4"]) + args +
         ["-U", uuid, "-E", "hash_seed=3c9d8a6e-1f2b-4c5d-8e7f-a0b1c2d3e4f5,root_owner=0:0",
          img], env=env)
    bs = 4096 if "4k" in name else 1024

    def src(fn, data):
        p = os.path.join(d, fn)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def rbytes(n):
        return bytes(rng.getrandbits(8) for _ in range(n))

    blob = rbytes(65536)
    # a POSIX ACL in the VFS format: user::rw- user:1000:r-- group::r-- mask::rw- other::r--
    acl = src("acl", struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", t, p, i) for t, p, i in
        ((1, 6, 0xFFFFFFFF), (2, 4, 1000), (4, 4, 0xFFFFFFFF), (0x10, 6, 0xFFFFFFFF), (0x20, 4, 0xFFFFFFFF))))
    small = src("small", b"hello, fuzzed world\n" * 5)
    medium = src("medium", blob[:40000])
    empty = src("empty", b"")
    frag = bytearray()
    for i in range(14):
        frag += blob[i * 997:i * 997 + bs] + b"\0" * bs * (1 + i % 3)
    frag = src("frag", bytes(frag))
    frag2 = bytearray()
    for i in range(8):
        frag2 += blob[i * 131:i * 131 + 2 * bs] + b"\0" * bs
    frag2 = src("frag2", bytes(frag2))
    # 400 one-block extents: a two-level extent tree at 1 KiB blocks
    frag3 = src("frag3", b"".join(blob[i * 61:i * 61 + bs] + b"\0" * bs for i in range(400)))
    sparse = os.path.join(d, "sparse")
    with open(sparse, "wb") as f:
        for off in (0, 1 << 20, 100 << 20, 3 << 30):
            f.seek(off)
            f.write(blob[:3000])
    cmds = [
        "mkdir d", "mkdir d/e", "mkdir big", "mkdir d/e/deep",
        "write %s small" % small,
        "write %s d/medium" % medium,
        "write %s d/empty" % empty,
        "write %s frag" % frag,
        "write %s d/e/frag2" % frag2,
        "write %s d/frag3" % frag3,
        "write %s sparse" % sparse,
        "write %s d/e/deep/leaf" % small,
        "symlink fastlink d/medium",
        "symlink d/slowlink /" + "/".join("component%02d" % i for i in range(20)),
        "symlink d/e/dangling nowhere/at/all",
        "ea_set small user.big " + "B" * 300,
        "ea_set small user.a 1",
        "ea_set small trusted.t tval",
        "ea_set d user.dirattr " + "D" * 150,
        "ea_set d/medium user.inline small",
        "ea_set d/e/frag2 user.x " + "X" * 120,
        "ea_set d/e/frag2 security.selinux system_u:object_r:etc_t:s0",
        "ln small d/hardlink",
        "mkdir full",
        "ea_set -f %s d system.posix_acl_default" % acl,
        "ea_set -f %s d/medium system.posix_acl_access" % acl,
    ]
    # a linear one-block directory with little room left: the next entries
    # make rrfuse index it (htree_index_dir)
    cap = bs - 24 - (12 if "-csum" in name else 0) - 100
    for i in range(cap // 28):
        cmds.append("write %s full/f%018d" % (empty, i))
    if bs == 1024:
        # big enough for a two-level htree at 1 KiB blocks
        n, namelen = 700, 0
    else:
        n, namelen = 300, 24
    for i in range(n):
        ln = rng.randrange(180, 248) if namelen == 0 else rng.randrange(1, namelen)
        nm = ("e%04d_" % i) + ("n" * ln)
        cmds.append("write %s big/%s" % (empty if i % 5 else small, nm))
    cmdfile = src("cmds", ("\n".join(c for c in cmds if c) + "\n").encode())
    _run(["debugfs", "-w", "-f", cmdfile, img], env=env)
    # e2fsck -D indexes the big directory (htree) and fixes link counts.
    _run(["e2fsck", "-fyD", img], env=env, ok=(0, 1, 2))
    _run(["e2fsck", "-fn", img], env=env)
    with open(img, "rb") as f:
        data = f.read()
    return Template(name, data)


class Template:
    def __init__(self, name, data):
        self.name = name
        self.data = data
        fs = FS(bytearray(data))
        self.fs = fs
        self.regions = {}     # kind -> [region]
        self.meta_blocks = set()
        self.paths = {}       # ino -> path
        self._scan()
        self._verify_csums()

    def add(self, kind, off, length, desc, spec, fields=None, extra=None, owner=None):
        if owner and owner.startswith("<"):
            owner = None
        self.regions.setdefault(kind, []).append(
            dict(kind=kind, off=off, len=length, desc=desc, spec=spec,
                 fields=fields or [], extra=extra or {}, owner=owner))

    def _scan(self):
        fs = self.fs
        bs = fs.bs
        mb = self.meta_blocks
        mb.update([fs.fdb, fs.fdb + 1])
        self.add("sb", 1024, 1024, "superblock", ("sb",), SB_FIELDS)
        gdf = GD_FIELDS64 if fs.desc_size >= 64 else GD_FIELDS32
        for g in range(fs.ngroups):
            self.add("gd", fs.gd_off(g), fs.desc_size, "group desc %d" % g, ("gd", g), gdf)
            bb, ib, it = fs.block_bitmap(g), fs.inode_bitmap(g), fs.inode_table(g)
            mb.update([bb, ib, it, it + 1])
            self.add("bbitmap", bb * bs, max(fs.cpg // 8, 1), "block bitmap of group %d (blk %d)" % (g, bb),
                     ("bbitmap", g))
            self.add("ibitmap", ib * bs, max(fs.ipg // 8, 1), "inode bitmap of group %d (blk %d)" % (g, ib),
                     ("ibitmap", g))
        # walk the tree from the root
        seen = {}
        todo = [(2, "/")]
        inodes = {7: "<resize>", 8: "<journal>"}
        while todo:
            ino, path = todo.pop()
            if ino in seen:
                continue
            seen[ino] = path
            inodes[ino] = path
            ib = fs.inode(ino)
            flags = u32(ib, 0x20)
            maps, tree = fs.extents(ino)
            for blk, level in fs.blockmap(ino)[1]:
                mb.add(blk)
                self.add("indirect", blk * bs, bs, "%s block %d of ino %d %s" % (
                    ("IND", "DIND", "TIND")[level - 1], blk, ino, path), None,
                    self._indirect_fields(blk), owner=path)
            for blk, depth in tree:
                mb.add(blk)
                self.add("extent", blk * bs, bs, "extent block %d (depth %d) of ino %d %s" % (blk, depth, ino, path),
                         ("extent", blk, ino), self._extent_fields(blk, depth), owner=path)
            blocks = fs.file_blocks(ino)
            dx_nodes, levels = set(), 0
            if flags & INDEX_FL and blocks:
                root = fs.block(blocks[0][1])
                levels = root[0x1E]
                if levels:
                    cnt = u16(root, 0x22)
                    for k in range(cnt):
                        dx_nodes.add(u32(root, 0x24 if k == 0 else 0x20 + 8 * k + 4))
            is_dir = (u16(ib, 0) & 0xF000) == 0x4000
            if is_dir:
                for lb, pb in blocks:
                    mb.add(pb)
                    if flags & INDEX_FL and lb == 0:
                        sub, spec = "dxroot", ("dx", pb, ino, 0x20)
                    elif flags & INDEX_FL and lb in dx_nodes:
                        sub, spec = "dxnode", ("dx", pb, ino, 8)
                    else:
                        sub, spec = "dirleaf", ("dirleaf", pb, ino)
                    self.add("dir", pb * bs, bs, "%s block %d (lblk %d) of dir ino %d %s" % (sub, pb, lb, ino, path),
                             spec, extra=dict(sub=sub), owner=path)
                    for _, cino, name, ft in fs.dirents(pb):
                        if name in (b".", b".."):
                            continue
                        todo.append((cino, path.rstrip("/") + "/" + name.decode("latin-1")))
            acl = u32(ib, 0x68) | (u16(ib, 0x76) << 32)
            if acl and acl not in mb:
                mb.add(acl)
                self.add("xattr", acl * bs, bs, "xattr block %d of ino %d %s" % (acl, ino, path),
                         ("xattr", acl), self._xattr_fields(acl), owner=path)
        self.paths = inodes
        for ino, path in sorted(inodes.items()):
            ib = fs.inode(ino)
            typ = u16(ib, 0) & 0xF000
            fields = []
            for f in INODE_FIELDS:
                fields += [f] * INODE_FIELD_WEIGHT.get(f[0], 1)
            if u32(ib, 0x20) & EXTENTS_FL:
                fields += IBLOCK_EXT_FIELDS
            elif fs.has_blocks(ino):
                fields += [("i_block[%d]" % k, 0x28 + 4 * k, 4, "blk") for k in range(15)
                           if k >= 12 or u32(ib, 0x28 + 4 * k)] * 2
            fields += self._ibody_xattr_fields(ib) * 2
            fields = [f for f in fields if f[1] + f[2] <= fs.inode_size]
            self.add("inode", fs.inode_off(ino), fs.inode_size,
                     "inode %d %s (%s)" % (ino, path, TYPE_NAMES.get(typ, "%o" % typ)), ("inode", ino), fields,
                     owner=path)
        # big directories get more attention than '.' and lost+found
        self.meta_list = sorted(mb)

    def _extent_fields(self, blk, depth):
        f = [("eh_magic", 0, 2, "int"), ("eh_entries", 2, 2, "int"), ("eh_max", 4, 2, "int"),
             ("eh_depth", 6, 2, "int")]
        n = u16(self.fs.block(blk), 2)
        for i in range(min(n + 1, 340)):
            o = 12 + 12 * i
            if depth == 0:
                f += [("ext[%d].ee_block" % i, o, 4, "int"), ("ext[%d].ee_len" % i, o + 4, 2, "int"),
                      ("ext[%d].ee_start_hi" % i, o + 6, 2, "int"), ("ext[%d].ee_start_lo" % i, o + 8, 4, "blk")]
            else:
                f += [("idx[%d].ei_block" % i, o, 4, "int"), ("idx[%d].ei_leaf_lo" % i, o + 4, 4, "blk"),
                      ("idx[%d].ei_leaf_hi" % i, o + 8, 2, "int")]
        return f

    def _indirect_fields(self, blk):
        b = self.fs.block(blk)
        used = [k for k in range(self.fs.bs // 4) if u32(b, 4 * k)]
        extra = [0, len(used), self.fs.bs // 4 - 1]
        return [("ptr[%d]" % k, 4 * k, 4, "blk") for k in sorted(set(used[:64] + extra))]

    def _ibody_xattr_fields(self, ib):
        if len(ib) <= 0x84:
            return []
        start = 0x80 + u16(ib, 0x80)
        if start + 4 > len(ib) or u32(ib, start) != 0xEA020000:
            return []
        f = [("ibody.magic", start, 4, "int")]
        o, i = start + 4, 0
        while o + 16 <= len(ib) and u32(ib, o) != 0:
            nl = ib[o]
            f += [("ibody.e[%d].e_name_len" % i, o, 1, "int"), ("ibody.e[%d].e_name_index" % i, o + 1, 1, "small"),
                  ("ibody.e[%d].e_value_offs" % i, o + 2, 2, "int"),
                  ("ibody.e[%d].e_value_inum" % i, o + 4, 4, "ino"),
                  ("ibody.e[%d].e_value_size" % i, o + 8, 4, "int"), ("ibody.e[%d].e_hash" % i, o + 12, 4, "int")]
            o += (16 + nl + 3) & ~3
            i += 1
        return f

    def _xattr_fields(self, blk):
        b = self.fs.block(blk)
        f = [("h_magic", 0, 4, "int"), ("h_refcount", 4, 4, "int"), ("h_blocks", 8, 4, "int"),
             ("h_hash", 12, 4, "int"), ("h_checksum", 16, 4, "int")]
        o, i = 32, 0
        while o + 16 <= self.fs.bs and u32(b, o) != 0:
            nl = b[o]
            f += [("e[%d].e_name_len" % i, o, 1, "int"), ("e[%d].e_name_index" % i, o + 1, 1, "small"),
                  ("e[%d].e_value_offs" % i, o + 2, 2, "int"), ("e[%d].e_value_inum" % i, o + 4, 4, "ino"),
                  ("e[%d].e_value_size" % i, o + 8, 4, "int"), ("e[%d].e_hash" % i, o + 12, 4, "int")]
            o += (16 + nl + 3) & ~3
            i += 1
        f.append(("end-of-entries", o, 4, "int"))
        return f

    def _verify_csums(self):
        fs, img = self.fs, self.fs.img
        bad = []
        for kind, regs in self.regions.items():
            for r in regs:
                spec = r["spec"]
                if spec is None:
                    continue
                if spec[0] in ("bbitmap", "ibitmap"):
                    # uninitialised groups have no bitmap checksum to check
                    flags = u16(img, fs.gd_off(spec[1]) + 0x12)
                    if flags & (2 if spec[0] == "bbitmap" else 1):
                        continue
                ok = refix(fs, img, spec, store=False)
                if ok is False:
                    bad.append(r["desc"])
        if bad:
            raise RuntimeError("template %s: checksum self-check failed for: %s" % (self.name, "; ".join(bad[:10])))


# ----------------------------------------------------------------------------
# mutation

KIND_WEIGHTS = [("sb", 10), ("gd", 10), ("bbitmap", 6), ("ibitmap", 6), ("inode", 32),
                ("extent", 10), ("indirect", 10), ("dir", 20), ("xattr", 8)]


def _interesting(rng, tmpl, size, hint, old):
    mx = (1 << (8 * size)) - 1
    fs = tmpl.fs
    choices = ["zero", "ones", "flip", "inc", "dec", "rand", "small", "sign"]
    if hint == "blk":
        choices += ["meta", "meta", "edge", "edge"]
    if hint == "ino":
        choices += ["ino", "ino"]
    if hint == "size":
        choices += ["huge", "huge"]
    c = rng.choice(choices)
    if c == "zero":
        v = 0
    elif c == "ones":
        v = mx
    elif c == "flip":
        v = old ^ (1 << rng.randrange(8 * size))
    elif c == "inc":
        v = old + rng.randint(1, 3)
    elif c == "dec":
        v = old - rng.randint(1, 3)
    elif c == "rand":
        v = rng.getrandbits(8 * size)
    elif c == "small":
        v = rng.randrange(0, 17)
    elif c == "sign":
        v = 1 << (8 * size - 1)
    elif c == "meta":
        v = rng.choice(tmpl.meta_list)
    elif c == "edge":
        v = fs.blocks_count + rng.choice([-1, 0, 1, 1000])
    elif c == "ino":
        v = rng.choice([0, 1, 2, 7, 8, 11, fs.ipg * fs.ngroups, fs.ipg * fs.ngroups + 1,
                        rng.choice(list(tmpl.paths))])
    elif c == "huge":
        v = rng.choice([0x7FFFFFFF, 0xFFFFFFFF, 1 << 31, old * 4096 + 1])
    return c, v & mx


def mutate_field(rng, tmpl, img, r, field):
    name, rel, size, hint = field
    o = r["off"] + rel
    if hint == "bytes":
        k = rng.randint(1, min(4, size))
        how = rng.choice(["rand", "zero", "ones", "flip"])
        for _ in range(k):
            p = o + rng.randrange(size)
            if how == "rand":
                img[p] = rng.getrandbits(8)
            elif how == "zero":
                img[p] = 0
            elif how == "ones":
                img[p] = 0xFF
            else:
                img[p] ^= 1 << rng.randrange(8)
        return "%s: %d byte(s) %s" % (name, k, how)
    old = getint(img, o, size)
    if hint == "mode" and rng.random() < 0.6:
        v = (old & 0x0FFF) | rng.choice(MODE_TYPES)
        how = "type"
    elif hint == "iflags" and rng.random() < 0.7:
        v = old ^ rng.choice(IFLAG_BITS)
        how = "flagflip"
    elif hint == "gdflags" and rng.random() < 0.8:
        v = old ^ rng.choice([1, 2, 4])     # INODE_UNINIT, BLOCK_UNINIT, ITABLE_ZEROED
        how = "flagflip"
    elif hint == "flags" and rng.random() < 0.7:
        v = old ^ (1 << rng.randrange(8 * size))
        how = "bitflip"
    elif hint == "small" and rng.random() < 0.6:
        v = rng.choice([0, 1, 2, 3, 4, 6, 16, 31, 64, 255])
        how = "small"
    else:
        how, v = _interesting(rng, tmpl, size, hint, old)
    putint(img, o, size, v)
    return "%s %#x -> %#x (%s)" % (name, old, getint(img, o, size), how)


def mutate_raw(rng, img, r):
    o, n = r["off"], r["len"]
    how = rng.choice(["bytes", "bits", "run", "run"])
    if how == "bytes":
        k = rng.randint(1, 8)
        pos = sorted(rng.randrange(n) for _ in range(k))
        for p in pos:
            img[o + p] = rng.getrandbits(8)
        return "random bytes at +%s" % ",".join("%#x" % p for p in pos)
    if how == "bits":
        k = rng.randint(1, 4)
        pos = [rng.randrange(n * 8) for _ in range(k)]
        for p in pos:
            img[o + p // 8] ^= 1 << (p % 8)
        return "bit flips at +%s" % ",".join("%#x.%d" % (p // 8, p % 8) for p in pos)
    ln = rng.randint(2, min(64, n))
    p = rng.randrange(n - ln + 1)
    fill = rng.choice(["rand", "zero", "ones"])
    if fill == "rand":
        img[o + p:o + p + ln] = bytes(rng.getrandbits(8) for _ in range(ln))
    else:
        img[o + p:o + p + ln] = (b"\0" if fill == "zero" else b"\xff") * ln
    return "%s run of %d bytes at +%#x" % (fill, ln, p)


def mutate_bitmap(rng, tmpl, img, r):
    """Bitmap changes that matter: in-use things marked free (the allocator
    hands them out again), free things marked in use."""
    o, n = r["off"], r["len"]
    bits = [i for i in range(n * 8) if tmpl.data[o + i // 8] >> (i % 8) & 1]
    clear = [i for i in range(n * 8) if not tmpl.data[o + i // 8] >> (i % 8) & 1]
    choices = ["free-used", "free-run", "use-free"]
    fs = tmpl.fs
    g = r["spec"][1]
    tree_inos = [i - 1 - g * fs.ipg for i in tmpl.paths if g * fs.ipg < i <= (g + 1) * fs.ipg and i > 11]
    if r["kind"] == "ibitmap" and tree_inos:
        choices += ["free-tree-inode", "free-tree-inode"]
    how = rng.choice(choices)
    if how == "free-used" and bits:
        pos = rng.sample(bits, min(len(bits), rng.randint(1, 32)))
    elif how == "free-run" and bits:
        p = rng.choice(bits)
        pos = [i for i in bits if p <= i < p + rng.randint(2, 256)]
    elif how == "free-tree-inode":
        pos = rng.sample(tree_inos, min(len(tree_inos), rng.randint(1, 4)))
    else:
        how = "use-free"
        pos = rng.sample(clear, min(len(clear), rng.randint(1, 32))) if clear else []
    for i in pos:
        img[o + i // 8] ^= 1 << (i % 8)
    return "%s: %d bit(s) from %s" % (how, len(pos), ",".join(str(i) for i in sorted(pos)[:6]) +
                                      ("..." if len(pos) > 6 else ""))


def mutate_dir(rng, tmpl, img, r):
    """Field-aware mutation of a directory block (dirents or dx structures)."""
    fs = tmpl.fs
    sub = r["extra"]["sub"]
    base = r["off"]
    blk = base // fs.bs
    if sub in ("dxroot", "dxnode") and rng.random() < 0.7:
        co = 0x20 if sub == "dxroot" else 8
        fields = [("dx.limit", co, 2, "int"), ("dx.count", co + 2, 2, "int"), ("dx.block0", co + 4, 4, "int")]
        if sub == "dxroot":
            fields += [("dx_root.reserved_zero", 0x18, 4, "int"), ("dx_root.hash_version", 0x1C, 1, "small"),
                       ("dx_root.info_length", 0x1D, 1, "small"), ("dx_root.indirect_levels", 0x1E, 1, "small"),
                       ("dx_root.unused_flags", 0x1F, 1, "flags"), ("dot.rec_len", 4, 2, "int"),
                       ("dotdot.inode", 12, 4, "ino"), ("dotdot.rec_len", 16, 2, "int")]
        cnt = u16(img, base + co + 2)
        for k in range(1, min(cnt, 200)):
            fields += [("dx[%d].hash" % k, co + 8 * k, 4, "int"), ("dx[%d].block" % k, co + 8 * k + 4, 4, "int")]
        f = rng.choice(fields)
        return sub + " " + mutate_field(rng, tmpl, img, r, f)
    ents = fs.dirents(blk)
    if not ents or rng.random() < 0.2:
        return sub + " " + mutate_raw(rng, img, r)
    eo, ino, name, ft = rng.choice(ents)
    field = rng.choice([("inode", eo, 4, "ino"), ("rec_len", eo + 4, 2, "int"),
                        ("name_len", eo + 6, 1, "int"), ("file_type", eo + 7, 1, "small"),
                        ("name", eo + 8, max(len(name), 1), "bytes")])
    f = (("dirent@%#x(%s)." % (eo, name.decode("latin-1")[:20])) + field[0],) + field[1:]
    return sub + " " + mutate_field(rng, tmpl, img, r, f)


def make_case(templates, seed, n):
    """Deterministically derive case n of a run: (template, image, description, walk seed)."""
    rng = random.Random("rrfuzz:%s:%d" % (seed, n))
    tmpl = templates[rng.randrange(len(templates))]
    kinds = [(k, w) for k, w in KIND_WEIGHTS if tmpl.regions.get(k)]
    kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
    regs = tmpl.regions[kind]
    if kind == "dir":
        # one directory first (the htree one twice as likely), then one of its
        # blocks: the index blocks of an htree half of the time
        owners = sorted(set(r["owner"] for r in regs if r["owner"] != "/lost+found"))
        owner = rng.choice(owners + [o for o in owners if o.endswith("/big")])
        regs = [r for r in regs if r["owner"] == owner]
        idx = [r for r in regs if r["extra"]["sub"] != "dirleaf"]
        if idx and rng.random() < 0.5:
            regs = idx
    if kind == "inode":
        # favour the inodes of the populated tree over the 300 empty files
        interesting = [r for r in regs if "/big/" not in r["desc"] and "/full/" not in r["desc"]]
        if rng.random() < 0.85:
            regs = interesting
    r = rng.choice(regs)
    img = bytearray(tmpl.data)
    descs = []
    nmut = rng.choices([1, 2, 3], [70, 20, 10])[0]
    for _ in range(nmut):
        if kind == "dir":
            descs.append(mutate_dir(rng, tmpl, img, r))
        elif kind in ("bbitmap", "ibitmap") and rng.random() < 0.75:
            descs.append(mutate_bitmap(rng, tmpl, img, r))
        elif r["fields"] and rng.random() < 0.75:
            descs.append(mutate_field(rng, tmpl, img, r, rng.choice(r["fields"])))
        else:
            descs.append(mutate_raw(rng, img, r))
    fix = (tmpl.fs.csum or tmpl.fs.gdt_csum) and rng.random() < 0.6
    if fix:
        # re-read the geometry: a superblock mutation may have moved things
        try:
            refix(tmpl.fs, img, r["spec"])
        except (struct.error, IndexError, ValueError):
            pass
    desc = "[%s] %s: %s%s" % (tmpl.name, r["desc"], "; ".join(descs), " +csum-refix" if fix else "")
    walk_seed = rng.getrandbits(32)
    remount = kind in ("bbitmap", "ibitmap", "gd") or rng.random() < 0.25
    walkers = 2 if rng.random() < 0.2 else 1
    if remount:
        desc += " +remount"
    if walkers > 1:
        desc += " +%d-walkers" % walkers
    return dict(tmpl=tmpl, img=img, desc=desc, walk_seed=walk_seed, focus=r.get("owner"),
                remount=remount, walkers=walkers)


# ----------------------------------------------------------------------------
# the walker (runs in a child process, against the mount)

def walker(mnt, seed, focus=None):
    """Walk the whole tree, then modify it, with extra work on `focus` (the
    path, relative to the mount, of the object whose metadata was corrupted).
    Every operation may fail with an OSError; the parent enforces the time
    limit.  Prints "op DESC" before each operation so that a hang can be
    attributed, and "done ops=N errors=M" at the end."""
    import ctypes
    import errno as errno_mod
    rng = random.Random(seed)
    out = sys.stdout
    deadline = time.monotonic() + 60
    state = {"nops": 0, "nerr": 0}
    errs = {}
    libc = ctypes.CDLL(None, use_errno=True)
    # Confine every path to the mount: a corrupted image can hold symlinks to
    # anywhere (absolute targets, "../../.."), and a directory entry can come
    # to point at one while we work.  Inside the chroot they cannot escape.
    out.write("op chroot %s\n" % mnt)
    out.flush()
    try:
        os.chroot(mnt)
        os.chdir("/")
    except OSError as e:
        out.write("done ops=0 errors=1 chroot:%s\n" % errno_mod.errorcode.get(e.errno, e.errno))
        return 0
    mnt = "/"

    def op(desc, fn, *a, **kw):
        out.write("op %s\n" % desc)
        out.flush()
        state["nops"] += 1
        try:
            return fn(*a, **kw)
        except OSError as e:
            state["nerr"] += 1
            name = errno_mod.errorcode.get(e.errno, str(e.errno))
            errs[name] = errs.get(name, 0) + 1
            return None

    def cerr(r):
        if r != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    regs, dirs, links, others = [], [mnt], [], []
    seen = set()
    MAXREAD = 16 << 20

    def seek_walk(fd, size):
        pos, n = 0, 0
        while pos < size and n < 64:
            n += 1
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            h = os.lseek(fd, d, os.SEEK_HOLE)
            if h <= pos:
                break
            pos = h

    def read_all(p):
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            total = 0
            while total < MAXREAD:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                total += len(b)
            seek_walk(fd, os.fstat(fd).st_size)
            return total
        finally:
            os.close(fd)

    def xattrs(p):
        names = os.listxattr(p, follow_symlinks=False)
        for nm in names[:64]:
            op("getxattr %s %s" % (p, nm), os.getxattr, p, nm, follow_symlinks=False)

    def walk(root):
        stack = [(root, 0)]
        nentries = 0
        while stack and time.monotonic() < deadline:
            d, depth = stack.pop()
            st = op("lstat %s" % d, os.lstat, d)
            if st is None or not stat.S_ISDIR(st.st_mode):
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            names = op("listdir %s" % d, os.listdir, d)
            op("listxattr %s" % d, xattrs, d)
            if not names:
                continue
            for nm in names[:20000]:
                nentries += 1
                if nentries > 50000:
                    break
                p = os.path.join(d, nm)
                st = op("lstat %s" % p, os.lstat, p)
                if st is None:
                    continue
                op("listxattr %s" % p, xattrs, p)
                if stat.S_ISDIR(st.st_mode):
                    dirs.append(p)
                    if depth < 40:
                        stack.append((p, depth + 1))
                elif stat.S_ISLNK(st.st_mode):
                    links.append(p)
                    op("readlink %s" % p, os.readlink, p)
                elif stat.S_ISREG(st.st_mode):
                    regs.append(p)
                    op("read %s" % p, read_all, p)
                else:
                    others.append(p)

    payload = bytes(rng.getrandbits(8) for _ in range(256)) * 256    # 64 KiB

    def write_file(p, data, flags, off=None):
        fd = os.open(p, flags | os.O_NOFOLLOW, 0o644)
        try:
            if off is None:
                os.write(fd, data)
            else:
                os.pwrite(fd, data, off)
            if rng.random() < 0.5:
                os.fsync(fd)
        finally:
            os.close(fd)

    def fallocate(p, mode, off, ln):
        fd = os.open(p, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            cerr(libc.fallocate(fd, ctypes.c_int(mode), ctypes.c_long(off), ctypes.c_long(ln)))
        finally:
            os.close(fd)

    def syncfs(p):
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
        try:
            cerr(libc.syncfs(fd))
        finally:
            os.close(fd)

    def pick(lst):
        return rng.choice(lst) if lst else None

    def rname(prefix):
        return prefix + "_" + "%x" % rng.getrandbits(24) + "y" * rng.choice([0, 0, 5, 30, 100, 200])

    # ---- focused work on the corrupted object
    def focus_dir(d):
        names = op("listdir %s" % d, os.listdir, d) or []
        for nm in names[:300]:
            op("lstat %s/%s" % (d, nm), os.lstat, os.path.join(d, nm))
        for ln in (1, 2, 3, 7, 8, 12, 15, 16, 31, 32, 60, 100, 200, 250, 254, 255):
            op("probe %s len %d" % (d, ln), os.lstat, os.path.join(d, "q" * ln))
        made = []
        for i in range(rng.randint(5, 40)):
            p = os.path.join(d, rname("fzc%02d" % i))
            if op("create %s" % p, write_file, p, payload[:rng.choice([0, 10, 5000])],
                  os.O_CREAT | os.O_WRONLY) is not None or os.path.lexists(p):
                made.append(p)
        sub = os.path.join(d, "fz_subdir")
        op("mkdir %s" % sub, os.mkdir, sub)
        op("create %s/x" % sub, write_file, os.path.join(sub, "x"), b"x", os.O_CREAT | os.O_WRONLY)
        victims = [os.path.join(d, n) for n in names if n not in (".", "..")]
        rng.shuffle(victims)
        for v in victims[:8]:
            if rng.random() < 0.5:
                op("unlink %s" % v, os.unlink, v)
            else:
                op("rename %s" % v, os.rename, v, os.path.join(pick(dirs) or mnt, rname("fzmv")))
        for v in victims[8:12]:
            op("rename-in %s" % v, os.rename, v, os.path.join(d, rname("fzren")))
        for p in made[:10]:
            op("unlink %s" % p, os.unlink, p)
        op("rename subdir", os.rename, sub, os.path.join(mnt, rname("fzsub")))
        op("setxattr %s" % d, os.setxattr, d, "user.fzdir", payload[:rng.choice([8, 200, 1500])])
        op("listdir %s" % d, os.listdir, d)
        op("rmdir %s" % d, os.rmdir, d)

    def focus_reg(p):
        op("read %s" % p, read_all, p)
        st = op("lstat %s" % p, os.lstat, p)
        size = st.st_size if st else 0
        for off in (0, 4096, 5000, 12288, 40000, size, size + 8192, 1 << 20):
            op("pwrite %s @%d" % (p, off), write_file, p, payload[:rng.choice([1, 4096, 9000])],
               os.O_WRONLY, off)
        op("read %s" % p, read_all, p)
        for mode, off, ln in ((0, 0, 65536), (1, 100000, 50000), (3, 4096, 8192),
                              (3, 0, 1 << 20), (0x10, 8192, 4096)):
            op("fallocate %s %d %d %d" % (p, mode, off, ln), fallocate, p, mode, off, ln)
        op("truncate %s" % p, os.truncate, p, rng.choice([0, 1, 4095, 5000, size // 2, size + 100000]))
        op("read %s" % p, read_all, p)
        op("append %s" % p, write_file, p, payload[:20000], os.O_WRONLY | os.O_APPEND)
        op("chmod %s" % p, os.chmod, p, 0o640)
        op("utime %s" % p, os.utime, p, (1, 2))
        op("setxattr %s" % p, os.setxattr, p, "user.fz1", payload[:rng.choice([4, 100, 3000])])
        op("setxattr %s" % p, os.setxattr, p, "user.fz2", payload[:rng.choice([4, 100, 3000])])
        op("listxattr %s" % p, xattrs, p)
        op("removexattr %s" % p, os.removexattr, p, "user.big")
        op("removexattr %s" % p, os.removexattr, p, "user.fz1")
        ln = os.path.join(mnt, rname("fzln"))
        op("link %s" % p, os.link, p, ln)
        op("unlink %s" % ln, os.unlink, ln)
        op("rename %s" % p, os.rename, p, p + ".fzr")
        op("unlink %s" % p, os.unlink, p + ".fzr")

    def focus_other(p):
        op("readlink %s" % p, os.readlink, p)
        op("listxattr %s" % p, xattrs, p)
        op("rename %s" % p, os.rename, p, os.path.join(mnt, rname("fzo")))

    def alloc_heavy():
        d = os.path.join(mnt, "fz_alloc")
        op("mkdir %s" % d, os.mkdir, d)
        for i in range(rng.randint(5, 30)):
            p = os.path.join(d, "f%02d" % i)
            op("create %s" % p, write_file, p, payload[:rng.choice([1, 4096, 65536])],
               os.O_CREAT | os.O_WRONLY)
        p = os.path.join(mnt, "fz_big")
        for k in range(rng.randint(1, 24)):
            op("write %s #%d" % (p, k), write_file, p, payload, os.O_CREAT | os.O_WRONLY | os.O_APPEND)
        op("fallocate %s" % p, fallocate, p, 0, 0, 4 << 20)
        op("read %s" % p, read_all, p)
        for i in range(rng.randint(1, 8)):
            op("mkdir", os.mkdir, os.path.join(d, "sub%d" % i))
        op("unlink %s" % p, os.unlink, p)

    # ---- the walk, then the work
    op("statvfs", os.statvfs, mnt)
    walk(mnt)
    fpath = os.path.join(mnt, focus.lstrip("/")) if focus and focus.startswith("/") else None
    if fpath:
        st = op("lstat focus %s" % fpath, os.lstat, fpath)
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                focus_dir(fpath)
            elif stat.S_ISREG(st.st_mode):
                focus_reg(fpath)
            else:
                focus_other(fpath)
        # the big directory is where htree bugs live
    else:
        alloc_heavy()

    # a little of everything, anywhere
    op("create", write_file, os.path.join(mnt, "fz_new"), payload[:10000],
       os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    r = pick(regs)
    if r:
        op("append %s" % r, write_file, r, payload[:5000], os.O_WRONLY | os.O_APPEND)
    r = pick(regs)
    if r:
        op("pwrite %s" % r, write_file, r, payload[:3000], os.O_WRONLY, rng.randrange(0, 65536))
    d = pick(dirs) or mnt
    nd = os.path.join(d, "fz_dir")
    op("mkdir %s" % nd, os.mkdir, nd)
    op("create in %s" % nd, write_file, os.path.join(nd, "f"), payload[:100], os.O_CREAT | os.O_WRONLY)
    for d in [x for x in dirs if x.endswith(("/big", "/full"))] + [pick(dirs) or mnt]:
        for i in range(rng.randint(1, 12)):
            p = os.path.join(d, rname("fz_entry_%02d" % i))
            op("create %s" % p, write_file, p, b"", os.O_CREAT | os.O_WRONLY)
    # new entries under a default ACL
    op("create /d/fz_acl", write_file, "/d/fz_acl", b"acl", os.O_CREAT | os.O_WRONLY)
    op("mkdir /d/fz_acldir", os.mkdir, "/d/fz_acldir")
    op("getxattr /d/fz_acldir", os.getxattr, "/d/fz_acldir", "system.posix_acl_default")
    src = pick(regs + links + others)
    if src:
        op("rename %s" % src, os.rename, src, os.path.join(pick(dirs) or mnt, "fz_renamed"))
    victim = pick(regs + links)
    if victim:
        op("unlink %s" % victim, os.unlink, victim)
    r = pick(regs + dirs)
    if r:
        op("setxattr %s" % r, os.setxattr, r, "user.fz", payload[:rng.choice([10, 300, 2000])])
        op("removexattr %s" % r, os.removexattr, r, "user.big")
    r = pick(regs)
    if r:
        op("truncate %s" % r, os.truncate, r, rng.choice([0, 1, 4095, 5000, 100000, 1 << 30]))
    r = pick(regs)
    if r:
        op("link %s" % r, os.link, r, os.path.join(mnt, "fz_link"))
    op("symlink", os.symlink, "/x" * rng.randrange(1, 200), os.path.join(pick(dirs) or mnt, "fz_sym"))
    d = pick(dirs)
    if d and d != mnt:
        op("rmdir %s" % d, os.rmdir, d)
    op("rename dir", os.rename, nd, os.path.join(mnt, "fz_dir2"))
    op("unlink fz_dir2/f", os.unlink, os.path.join(mnt, "fz_dir2", "f"))
    op("rmdir fz_dir2", os.rmdir, os.path.join(mnt, "fz_dir2"))
    op("syncfs", syncfs, mnt)
    # and look at everything once more: what the daemon wrote must read back
    seen.clear()
    walk(mnt)
    out.write("done ops=%d errors=%d %s\n" % (state["nops"], state["nerr"],
                                            ",".join("%s:%d" % kv for kv in sorted(errs.items()))))
    out.flush()
    return 0


# ----------------------------------------------------------------------------
# running a case

ACTIVE = {}            # case key -> Case (for cleanup on interrupt)
ACTIVE_LOCK = threading.Lock()
STOP = threading.Event()


def mountinfo_entry(mnt):
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                p = line.split()
                if len(p) > 4 and p[4] == mnt:
                    sep = p.index("-")
                    return p[2], p[sep + 1]
    except OSError:
        pass
    return None


def abort_connection(devnum):
    if not devnum:
        return
    try:
        major, minor = (int(x) for x in devnum.split(":"))
    except ValueError:
        return
    conn = (major << 20) | minor if major else minor
    for name in (str(conn), str(minor)):
        p = "/sys/fs/fuse/connections/%s/abort" % name
        if os.path.exists(p):
            try:
                with open(p, "w") as f:
                    f.write("1")
            except OSError:
                pass
            return


def gdb_backtrace(pid):
    if not shutil.which("gdb"):
        return "(gdb not installed)"
    try:
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                            "-ex", "thread apply all bt"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        return r.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return "(gdb timed out)"


def fusermount_u(mnt, lazy=False):
    try:
        r = subprocess.run(["fusermount3", "-uz" if lazy else "-u", mnt],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=15)
        return r.returncode == 0
    except subprocess.TimeoutExpired:
        return False


class Case:
    def __init__(self, args, workdir, templates, seed, n, image=None, walk_seed=None, focus=None,
                 remount=False, walkers=1):
        self.args = args
        self.n = n
        self.seed = seed
        self.workdir = workdir
        self.dir = os.path.join(workdir, "case-%d" % n)
        self.mnt = os.path.join(self.dir, "mnt")
        self.img = os.path.join(self.dir, "image")
        self.proc = None
        self.walkers = []
        self.devnum = None
        self.desc = ""
        self.templates = templates
        self.image_src = image
        self.walk_seed = walk_seed
        self.focus = focus
        self.remount = remount
        self.nwalkers = walkers
        self.detail = []
        self.gdb = ""
        self.outcome = "not run"
        self.walk_stats = None

    def prepare(self):
        os.makedirs(self.mnt, exist_ok=True)
        if self.image_src:
            shutil.copyfile(self.image_src, self.img)
            self.desc = "replay of %s" % self.image_src
            if self.walk_seed is None:
                self.walk_seed = 0
            return
        c = make_case(self.templates, self.seed, self.n)
        self.desc, self.walk_seed, self.focus = c["desc"], c["walk_seed"], c["focus"]
        self.remount, self.nwalkers = c["remount"], c["walkers"]
        with open(self.img, "wb") as f:
            f.write(c["img"])

    def log(self):
        try:
            with open(os.path.join(self.dir, "stderr"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def run(self):
        """Returns None (pass) or (classification, detail)."""
        self.prepare()
        res = self.session(0)
        if res is None and self.outcome == "mounted" and self.remount and not STOP.is_set():
            # mount what the first session left behind, and walk it again
            res = self.session(1)
            if res:
                res = (res[0], "second mount: " + res[1])
        return res

    def session(self, k):
        self.devnum = None
        self.walkers = []
        with open(os.path.join(self.dir, "stderr"), "ab") as errf:
            if k:
                errf.write(b"---- second mount ----\n")
                errf.flush()
            env = dict(os.environ)
            env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:print_summary=1:"
                           "handle_abort=1:allow_user_segv_handler=0")
            env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
            self.proc = subprocess.Popen([self.args.rrfuse_copy, self.img, self.mnt, "-f"] +
                                         (["-o", self.args.opts] if self.args.opts else []),
                                         stdin=subprocess.DEVNULL, stdout=errf, stderr=errf,
                                         env=env, start_new_session=True)
        # wait for the mount or for the daemon to give up
        deadline = time.monotonic() + MOUNT_TIMEOUT
        mounted = False
        while time.monotonic() < deadline:
            ent = mountinfo_entry(self.mnt)
            if ent and ent[1].startswith("fuse"):
                self.devnum = ent[0]
                mounted = True
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.005)
        if k == 0:
            self.outcome = "mounted" if mounted else "refused"
        if not mounted:
            if self.proc.poll() is None:
                self.gdb = gdb_backtrace(self.proc.pid)
                self.kill_daemon()
                return "HANG", "daemon neither mounted nor exited within %ds" % MOUNT_TIMEOUT
            if mountinfo_entry(self.mnt):
                fusermount_u(self.mnt, lazy=True)
            return self.classify_exit(self.proc.returncode, refused=True)
        # walk and modify in child processes
        hang = None
        walker_py = os.path.join(self.workdir, "rrfuzz_walker.py")
        for w in range(self.nwalkers):
            self.walkers.append(subprocess.Popen(
                [sys.executable, "-I", "-S", walker_py, "--walk", self.mnt,
                 "--walk-seed", str(self.walk_seed + 1000 * w + k)] +
                (["--focus", self.focus] if self.focus else []),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + WALK_TIMEOUT
        outs = []
        for w in self.walkers:
            try:
                wout, _ = w.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                if not hang:
                    if self.proc.poll() is None:
                        self.gdb = gdb_backtrace(self.proc.pid)
                    abort_connection(self.devnum)
                    hang = "walk did not finish within %ds" % WALK_TIMEOUT
                for x in self.walkers:
                    if x.poll() is None:
                        x.kill()
                try:
                    wout, _ = w.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    wout = b""
            outs.append(wout.decode("utf-8", "replace").splitlines())
        for wlines in outs:
            if hang:
                last = [l for l in wlines if l.startswith("op ")]
                hang += "; last op: %s" % (last[-1][3:] if last else "(none)")
            elif wlines and wlines[-1].startswith("done"):
                m = re.match(r"done ops=(\d+) errors=(\d+)", wlines[-1])
                if m:
                    a, b = self.walk_stats or (0, 0)
                    self.walk_stats = (a + int(m.group(1)), b + int(m.group(2)))
            else:
                self.detail.append("walker: " + " | ".join(wlines[-3:]))
        # unmount
        ok = False
        for _ in range(30):
            if fusermount_u(self.mnt):
                ok = True
                break
            if self.proc.poll() is not None and mountinfo_entry(self.mnt) is None:
                ok = True
                break
            time.sleep(0.1)
        if not ok:
            abort_connection(self.devnum)
            fusermount_u(self.mnt, lazy=True)
            if not hang:
                hang = "unmount failed (busy?)"
        try:
            self.proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            if not self.gdb:
                self.gdb = gdb_backtrace(self.proc.pid)
            self.kill_daemon()
            return "HANG", (hang + "; " if hang else "") + "daemon did not exit within %ds after unmount" % EXIT_TIMEOUT
        if mountinfo_entry(self.mnt):
            fusermount_u(self.mnt, lazy=True)
        cls = self.classify_exit(self.proc.returncode, refused=False)
        if cls:
            return cls
        if hang:
            return "HANG", hang
        return None

    def classify_exit(self, rc, refused):
        log = self.log()
        for pat in SANITIZER_PATTERNS:
            if pat in log:
                lines = [l for l in log.splitlines() if pat in l or "SUMMARY:" in l]
                return "SANITIZER", (lines[0].strip() if lines else pat)[:300]
        if rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = str(-rc)
            return "CRASH", "killed by %s%s" % (sig, " before mounting" if refused else "")
        if refused and rc == 0:
            return "BADEXIT", "exited 0 without mounting"
        if rc not in (0, 1):
            return "BADEXIT", "exit status %d%s" % (rc, " before mounting" if refused else "")
        return None

    def kill_daemon(self):
        if self.proc and self.proc.poll() is None:
            abort_connection(self.devnum)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if mountinfo_entry(self.mnt):
            fusermount_u(self.mnt, lazy=True)

    def emergency_cleanup(self):
        abort_connection(self.devnum)
        for w in self.walkers:
            if w.poll() is None:
                w.kill()
        self.kill_daemon()


def repro_cmd(args, seed, n):
    return "python3 %s --rrfuse %s%s --seed %s --one %d" % (
        os.path.abspath(__file__), args.rrfuse, " --opts '%s'" % args.opts if args.opts else "", seed, n)


def replay_cmd(args, image, walk_seed, focus, remount=False, walkers=1):
    return "python3 %s --rrfuse %s%s --replay %s --walk-seed %d%s%s%s" % (
        os.path.abspath(__file__), args.rrfuse, " --opts '%s'" % args.opts if args.opts else "",
        image, walk_seed, " --focus '%s'" % focus if focus else "", " --remount" if remount else "",
        " --walkers %d" % walkers if walkers > 1 else "")


def run_one(args, workdir, templates, seed, n):
    if STOP.is_set():
        return None
    c = Case(args, workdir, templates, seed, n)
    with ACTIVE_LOCK:
        ACTIVE[n] = c
    try:
        res = c.run()
    except Exception as e:            # harness trouble: report, do not hide
        c.emergency_cleanup()
        import traceback
        res = ("ERROR", "harness error: %r" % (e,))
        c.detail.append(traceback.format_exc())
    finally:
        with ACTIVE_LOCK:
            ACTIVE.pop(n, None)
    out = dict(n=n, desc=c.desc, walk_seed=c.walk_seed, result=res, log=c.log(), gdb=c.gdb,
               detail=c.detail, dir=c.dir, outcome=c.outcome, walk_stats=c.walk_stats)
    if res and args.keep_failed and not STOP.is_set():
        keep_failure(args, c, seed, res)
    shutil.rmtree(c.dir, ignore_errors=True)
    return out


def keep_failure(args, c, seed, res):
    d = os.path.join(args.keep_failed, "seed%s-case%d" % (seed, c.n))
    os.makedirs(d, exist_ok=True)
    # the image as mutated, before the daemon touched it
    if c.image_src:
        shutil.copyfile(c.image_src, os.path.join(d, "image"))
    else:
        with open(os.path.join(d, "image"), "wb") as f:
            f.write(make_case(c.templates, seed, c.n)["img"])
    with open(os.path.join(d, "stderr"), "w") as f:
        f.write(c.log())
    if c.gdb:
        with open(os.path.join(d, "gdb-backtrace"), "w") as f:
            f.write(c.gdb)
    with open(os.path.join(d, "README"), "w") as f:
        f.write("seed %s case %d\nmutation: %s\nclass: %s\ndetail: %s\nwalk seed: %d, focus: %s\n"
                "reproduce: %s\nreplay this image: %s\n"
                % (seed, c.n, c.desc, res[0], res[1], c.walk_seed, c.focus, repro_cmd(args, seed, c.n),
                   replay_cmd(args, os.path.join(d, "image"), c.walk_seed, c.focus, c.remount, c.nwalkers)))


def cleanup_all():
    with ACTIVE_LOCK:
        cases = list(ACTIVE.values())
    for c in cases:
        try:
            c.emergency_cleanup()
        except Exception:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=500, help="number of cases (default 500)")
    ap.add_argument("--seed", default=None, help="run seed (default: time-based, printed)")
    ap.add_argument("--rrfuse", default=DEFAULT_RRFUSE, help="daemon binary (default build-dev/rrfuse)")
    ap.add_argument("--opts", default="", help="mount options for rrfuse (-o), e.g. 'check'")
    ap.add_argument("--jobs", type=int, default=2, help="cases in parallel (default 2)")
    ap.add_argument("--keep-failed", metavar="DIR", help="keep failing images, logs and backtraces here")
    ap.add_argument("--one", type=int, metavar="N", help="run only case N of the seed")
    ap.add_argument("--first", type=int, default=0, metavar="N", help="first case number (default 0)")
    ap.add_argument("--replay", metavar="IMAGE", help="mount and walk an already mutated image")
    ap.add_argument("--walk-seed", type=int, default=None, help="walk seed for --replay (printed in failure reports)")
    ap.add_argument("--focus", metavar="PATH", help="with --replay: the corrupted object's path in the image")
    ap.add_argument("--remount", action="store_true", help="with --replay: mount a second time after the first")
    ap.add_argument("--walkers", type=int, default=1, help="with --replay: walkers in parallel (default 1)")
    ap.add_argument("--time-limit", type=float, default=0, metavar="SECONDS",
                    help="stop starting new cases after this long (0: no limit)")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a new one in /var/tmp)")
    ap.add_argument("--verbose", "-v", action="store_true", help="one line per case")
    ap.add_argument("--walk", metavar="MNT", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.walk:
        sys.exit(walker(args.walk, args.walk_seed or 0, args.focus))

    if os.geteuid() != 0:
        sys.exit("rrfuzz: needs root (FUSE mounts, connection aborts)")
    for tool in ("mke2fs", "debugfs", "e2fsck", "fusermount3"):
        if not shutil.which(tool):
            sys.exit("rrfuzz: %s not found" % tool)
    if not os.access(args.rrfuse, os.X_OK):
        sys.exit("rrfuzz: %s is not an executable (build it, or pass --rrfuse)" % args.rrfuse)
    args.rrfuse = os.path.abspath(args.rrfuse)
    if args.keep_failed:
        args.keep_failed = os.path.abspath(args.keep_failed)
        os.makedirs(args.keep_failed, exist_ok=True)
    seed = args.seed if args.seed is not None else str(int(time.time()))

    workdir = tempfile.mkdtemp(prefix="rrfuzz-", dir=args.workdir or "/var/tmp")
    # run a private copy: a rebuild of the binary in the middle of a run must
    # not make cases fail (reports name the original path)
    args.rrfuse_copy = os.path.join(workdir, "rrfuse")
    shutil.copy2(args.rrfuse, args.rrfuse_copy)
    # and of this script, for the walkers (editing it mid-run changes nothing)
    shutil.copy2(os.path.abspath(__file__), os.path.join(workdir, "rrfuzz_walker.py"))

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    passed = failed = 0
    stats = {"mounted": 0, "refused": 0, "ops": 0, "op errors": 0}
    t0 = time.monotonic()
    try:
        if args.replay:
            cases = [0]
            templates = None
        else:
            templates = [build_template(workdir, *t) for t in TEMPLATES]
            cases = [args.one] if args.one is not None else list(range(args.first, args.first + args.count))
        print("rrfuzz: seed %s, %d case(s), %d job(s), %s; templates built in %.1fs"
              % (seed, len(cases), args.jobs, args.rrfuse, time.monotonic() - t0), flush=True)

        def report(out):
            nonlocal passed, failed
            if out is None:
                return
            res = out["result"]
            stats[out["outcome"]] = stats.get(out["outcome"], 0) + 1
            if out["walk_stats"]:
                stats["ops"] += out["walk_stats"][0]
                stats["op errors"] += out["walk_stats"][1]
            if args.verbose and out["detail"]:
                print("note case %d: %s" % (out["n"], "; ".join(out["detail"])), flush=True)
            if res is None:
                passed += 1
                if args.verbose:
                    first = out["log"].strip().splitlines()[:1] if out["outcome"] == "refused" else []
                    print("ok   case %d (%s%s%s): %s" % (out["n"], out["outcome"],
                                                        ": " + first[0][:120] if first else "",
                                                        " ops=%d err=%d" % out["walk_stats"] if out["walk_stats"] else "",
                                                        out["desc"]), flush=True)
                return
            failed += 1
            print("FAIL seed=%s case=%d %s: %s | %s | reproduce: %s"
                  % (seed, out["n"], res[0], res[1], out["desc"],
                     repro_cmd(args, seed, out["n"]) if not args.replay else
                     replay_cmd(args, args.replay, out["walk_seed"], args.focus, args.remount, args.walkers)),
                  flush=True)
            if args.one is not None or args.replay or args.verbose:
                if out["log"]:
                    print("---- daemon stderr ----\n%s" % out["log"].rstrip(), flush=True)
                if out["gdb"]:
                    print("---- gdb backtrace ----\n%s" % out["gdb"].rstrip(), flush=True)

        if args.replay:
            c = Case(args, workdir, None, seed, 0, image=os.path.abspath(args.replay),
                     walk_seed=args.walk_seed, focus=args.focus, remount=args.remount, walkers=args.walkers)
            with ACTIVE_LOCK:
                ACTIVE[0] = c
            res = c.run()
            ACTIVE.pop(0, None)
            report(dict(n=0, desc=c.desc, walk_seed=c.walk_seed, result=res, log=c.log(), gdb=c.gdb,
                        detail=c.detail, dir=c.dir, outcome=c.outcome, walk_stats=c.walk_stats))
        else:
            ex = concurrent.futures.ThreadPoolExecutor(max(1, args.jobs))
            try:
                pending = set()
                it = iter(cases)
                exhausted = False
                while True:
                    while not exhausted and len(pending) < max(1, args.jobs):
                        if args.time_limit and time.monotonic() - t0 > args.time_limit:
                            exhausted = True
                            break
                        try:
                            n = next(it)
                        except StopIteration:
                            exhausted = True
                            break
                        pending.add(ex.submit(run_one, args, workdir, templates, seed, n))
                    if not pending:
                        break
                    done, pending = concurrent.futures.wait(pending, timeout=0.5,
                                                            return_when=concurrent.futures.FIRST_COMPLETED)
                    for fut in done:
                        report(fut.result())
            except KeyboardInterrupt:
                # abort the running cases first, so that the workers finish quickly
                STOP.set()
                print("rrfuzz: interrupted, cleaning up", file=sys.stderr, flush=True)
                cleanup_all()
                ex.shutdown(wait=True, cancel_futures=True)
                raise
            ex.shutdown(wait=True)
    except KeyboardInterrupt:
        STOP.set()
        cleanup_all()
    finally:
        cleanup_all()
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - t0
    print("rrfuzz: %.1fs; %s" % (elapsed, ", ".join("%s %d" % kv for kv in stats.items())),
          file=sys.stderr, flush=True)
    print("rrfuzz: %d passed, %d failed" % (passed, failed), flush=True)
    sys.exit(1 if failed or STOP.is_set() else 0)


if __name__ == "__main__":
    main()
