//! The routing scan's common case, compiled: walk one replicator message's element chain,
//! read the subscription name of its first URBT/URBC/URBE that names one, and say where its
//! statuses (URBS) are, which route by their own fields (Python reads those few).
//!
//! Python (`pipeline/urb/native.py`) chooses the message form from the header (eye-catcher,
//! version, byte order) and passes a *plan*: per known eye-catcher of that form, what the walk
//! does with it. This library only answers well-formed messages; anything else — a broken
//! header length or chain, an unknown eye-catcher, a kind the plan defers (URBF), more
//! statuses than the caller has room for — returns `DEFER`, and the caller runs the
//! pure-Python scan, which words every error
//! exactly as the full decoder does. So this code never has to agree with Python on an error,
//! only on what a well-formed plain message routes to; `tests/unit/integration/test_native_routing.py` holds the
//! two to that on generated and mutated messages.
//!
//! Plan layout (bytes): per kind, 8 bytes: eye-catcher (4), action (1: 0 plain, 1 plain with a
//! name field, 2 defer, 3 status), name field offset (1), name field length (1), pad (1).
//! Safe Rust only: every read is bounds-checked; a panic is caught at the boundary (`DEFER`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::slice;

/// The caller must run the pure-Python scan.
pub const DEFER: i64 = -1;
/// The message has a status: the caller routes it alone (`urbwalk_route`).
pub const STATUSES: i64 = -2;

const MIN_HEADER: usize = 16;
const ELEMENT_MIN: usize = 8;
const PLAN_ENTRY: usize = 8;

fn read_u32(data: &[u8], at: usize, big: bool) -> Option<u32> {
    let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
    Some(if big { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
}

fn read_i32(data: &[u8], at: usize, big: bool) -> Option<i32> {
    read_u32(data, at, big).map(|v| v as i32)
}

/// The plan entry for an eye-catcher: (action, name offset, name length).
fn lookup(plan: &[u8], eye: &[u8]) -> Option<(u8, usize, usize)> {
    plan.chunks_exact(PLAN_ENTRY)
        .find(|e| &e[..4] == eye)
        .map(|e| (e[4], e[5] as usize, e[6] as usize))
}

/// The name field's text: translated (EBCDIC, through the 256-byte table) and right-stripped
/// of blanks and NULs, as `scan._fields` does. Written to `out`; its length returned.
fn name_into(raw: &[u8], table: Option<&[u8]>, out: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    for (i, &b) in raw.iter().enumerate() {
        let c = match table {
            Some(t) => *t.get(b as usize)?,
            None => b,
        };
        *out.get_mut(i)? = c;
        if c != b' ' && c != 0 {
            n = i + 1;
        }
    }
    Some(n)
}

/// Where a message's statuses are: (offset, length) pairs, and how many statuses precede its
/// first plain element (-1: it has none) — the order its keys appear in.
struct Statuses<'a> {
    spans: &'a mut [u32],
    count: usize,
    plain_at: i64,
}

/// The subscription name's length (0: none named) for a well-formed message, its statuses in
/// `st`; or `None` to defer.
fn route(
    data: &[u8],
    big: bool,
    plan: &[u8],
    table: Option<&[u8]>,
    out: &mut [u8],
    st: &mut Statuses,
) -> Option<usize> {
    let n = data.len();
    if n < MIN_HEADER {
        return None;
    }
    let hlen = read_i32(data, 4, big)?;
    let lent = read_u32(data, 12, big)?;
    if lent as usize != n || hlen < MIN_HEADER as i32 || hlen as usize > n {
        return None;
    }
    let mut off = hlen as usize;
    let mut named: Option<usize> = None;
    while off < n {
        if n - off < ELEMENT_MIN {
            return None;
        }
        let eye = data.get(off..off + 4)?;
        let ln = read_i32(data, off + 4, big)?;
        if ln < ELEMENT_MIN as i32 || off + ln as usize > n {
            return None;
        }
        let ln = ln as usize;
        let (action, at, len) = lookup(plan, eye)?;
        if action < 2 && st.plain_at < 0 {
            st.plain_at = st.count as i64;
        }
        match action {
            0 => {}
            3 => {
                *st.spans.get_mut(2 * st.count)? = off as u32;
                *st.spans.get_mut(2 * st.count + 1)? = ln as u32;
                st.count += 1;
            }
            1 => {
                if named.is_none() && at + len <= ln {
                    let got = name_into(data.get(off + at..off + at + len)?, table, out)?;
                    if got > 0 {
                        named = Some(got);
                    }
                }
            }
            _ => return None,
        }
        off += ln;
    }
    Some(named.unwrap_or(0))
}

/// C entry point. `table` may be null (ASCII form: names read as Latin-1 bytes). Returns the
/// subscription name's length in `out` (0: none), or `DEFER`; `spans` (room for
/// `spans_len / 2` statuses) gets each status's (offset, length), `counts` the number of
/// statuses and how many precede the first plain element (-1: none).
///
/// # Safety
/// The pointers must be valid for the given lengths (ctypes passes `bytes` and buffers).
#[no_mangle]
pub unsafe extern "C" fn urbwalk_route(
    data: *const u8,
    n: usize,
    big: i32,
    plan: *const u8,
    plan_len: usize,
    table: *const u8,
    out: *mut u8,
    out_len: usize,
    spans: *mut u32,
    spans_len: usize,
    counts: *mut i64,
) -> i64 {
    if data.is_null() || plan.is_null() || out.is_null() || spans.is_null() || counts.is_null() {
        return DEFER;
    }
    let data = slice::from_raw_parts(data, n);
    let plan = slice::from_raw_parts(plan, plan_len);
    let table = if table.is_null() { None } else { Some(slice::from_raw_parts(table, 256)) };
    let out = slice::from_raw_parts_mut(out, out_len);
    let counts = slice::from_raw_parts_mut(counts, 2);
    let mut st = Statuses { spans: slice::from_raw_parts_mut(spans, spans_len), count: 0, plain_at: -1 };
    match catch_unwind(AssertUnwindSafe(|| route(data, big != 0, plan, table, out, &mut st))) {
        Ok(Some(len)) => {
            counts[0] = st.count as i64;
            counts[1] = st.plain_at;
            len as i64
        }
        _ => DEFER,
    }
}

/// C entry point for a batch of messages of one form (the caller sorts them by form): message
/// `m` is `buf[starts[m]..ends[m]]`. For each, `lens[m]` gets the subscription name's length
/// (its name in `names[m * name_cap..]`), `STATUSES` where the message has a status (the
/// caller walks it alone: statuses route by their own fields), or `DEFER`. Returns `n`, or
/// `DEFER` for bad arguments. One call per batch instead of one per message: the per-call cost
/// of ctypes was most of the routing scan.
///
/// # Safety
/// The pointers must be valid for the given lengths (numpy arrays and Arrow buffers).
#[no_mangle]
pub unsafe extern "C" fn urbwalk_route_many(
    buf: *const u8,
    buf_len: usize,
    starts: *const i64,
    ends: *const i64,
    n: usize,
    big: i32,
    plan: *const u8,
    plan_len: usize,
    table: *const u8,
    names: *mut u8,
    name_cap: usize,
    lens: *mut i64,
) -> i64 {
    if starts.is_null() || ends.is_null() || plan.is_null() || names.is_null() || lens.is_null()
        || (buf.is_null() && buf_len > 0)
    {
        return DEFER;
    }
    let buf: &[u8] = if buf_len == 0 { &[] } else { slice::from_raw_parts(buf, buf_len) };
    let starts = slice::from_raw_parts(starts, n);
    let ends = slice::from_raw_parts(ends, n);
    let plan = slice::from_raw_parts(plan, plan_len);
    let table = if table.is_null() { None } else { Some(slice::from_raw_parts(table, 256)) };
    let names = slice::from_raw_parts_mut(names, n * name_cap);
    let lens = slice::from_raw_parts_mut(lens, n);
    let mut spans = [0u32; 2];
    for m in 0..n {
        let found = catch_unwind(AssertUnwindSafe(|| {
            let (s, e) = (usize::try_from(starts[m]).ok()?, usize::try_from(ends[m]).ok()?);
            let data = buf.get(s..e)?;
            let out = names.get_mut(m * name_cap..(m + 1) * name_cap)?;
            // room for one status: the first says the message is not plain
            let mut st = Statuses { spans: &mut spans, count: 0, plain_at: -1 };
            match route(data, big != 0, plan, table, out, &mut st) {
                Some(len) if st.count == 0 => Some(len as i64),
                Some(_) => Some(STATUSES),
                None if st.count > 0 => Some(STATUSES),
                None => None,
            }
        }));
        lens[m] = match found {
            Ok(Some(v)) => v,
            _ => DEFER,
        };
    }
    n as i64
}

// -- the columnar reader's chain walk (pipeline/reassembly/columnar.py `_walk`) -------------

/// Arrays of the columnar walk, one entry per message.
struct Messages<'a> {
    buf: &'a [u8],
    pos: &'a [i64],
    end: &'a [i64],
    big: &'a [u8],
    ebcdic: &'a [u8],
}

/// Known eye-catchers: big-endian code, kind, and whether it is an EBCDIC one.
struct Eyes<'a> {
    codes: &'a [u32],
    kinds: &'a [i64],
    ebcdic: &'a [u8],
}

const OTHER: i64 = 0;

/// Walk message `m`'s chain: `emit(offset, kind, length)` per element; false where the chain
/// breaks (fewer than 8 bytes left, a length below 8 or past the message's end).
fn chain(ms: &Messages, eyes: &Eyes, m: usize, mut emit: impl FnMut(i64, i64, i64)) -> Option<bool> {
    let (mut p, e) = (*ms.pos.get(m)?, *ms.end.get(m)?);
    let big = *ms.big.get(m)? != 0;
    let ebcdic = *ms.ebcdic.get(m)?;
    while p < e {
        if e - p < ELEMENT_MIN as i64 || p < 0 {
            return Some(false);
        }
        let at = p as usize;
        let code = u32::from_be_bytes(ms.buf.get(at..at + 4)?.try_into().ok()?);
        let ln = read_i32(ms.buf, at + 4, big)? as i64;
        if ln < ELEMENT_MIN as i64 || p + ln > e {
            return Some(false);
        }
        let kind = eyes.codes.iter().position(|&c| c == code)
            .filter(|&i| eyes.ebcdic.get(i) == Some(&ebcdic))
            .and_then(|i| eyes.kinds.get(i).copied())
            .unwrap_or(OTHER);
        emit(p, kind, ln);
        p += ln;
    }
    Some(true)
}

/// C entry point: every message's element chain (`ok` messages only), as the numpy walk
/// gives it: per element (message, absolute offset, kind, length), in message order. With
/// `cap` 0 it only counts (and changes nothing); else it fills the four outputs (room for
/// `cap` elements) and clears `ok` of each message whose chain breaks. Returns the number of
/// elements, or `DEFER` (the caller runs the numpy walk).
///
/// # Safety
/// Every pointer must be valid for its length (`n` per message, `neyes` per eye-catcher,
/// `cap` per output), as numpy arrays passed by ctypes are.
#[no_mangle]
pub unsafe extern "C" fn urbwalk_chains(
    buf: *const u8, buf_len: usize, n: usize, pos: *const i64, end: *const i64, ok: *mut u8,
    big: *const u8, ebcdic: *const u8, codes: *const u32, kinds: *const i64,
    eye_ebcdic: *const u8, neyes: usize, out_msg: *mut i64, out_off: *mut i64,
    out_kind: *mut i64, out_ln: *mut i64, cap: usize,
) -> i64 {
    let nulls = [buf as usize, pos as usize, end as usize, ok as usize, big as usize,
                 ebcdic as usize, codes as usize, kinds as usize, eye_ebcdic as usize];
    if nulls.contains(&0) || (cap > 0 && [out_msg as usize, out_off as usize,
                                         out_kind as usize, out_ln as usize].contains(&0)) {
        return DEFER;
    }
    let ms = Messages {
        buf: slice::from_raw_parts(buf, buf_len), pos: slice::from_raw_parts(pos, n),
        end: slice::from_raw_parts(end, n), big: slice::from_raw_parts(big, n),
        ebcdic: slice::from_raw_parts(ebcdic, n),
    };
    let eyes = Eyes {
        codes: slice::from_raw_parts(codes, neyes), kinds: slice::from_raw_parts(kinds, neyes),
        ebcdic: slice::from_raw_parts(eye_ebcdic, neyes),
    };
    let ok = slice::from_raw_parts_mut(ok, n);
    let outs = if cap > 0 {
        Some((slice::from_raw_parts_mut(out_msg, cap), slice::from_raw_parts_mut(out_off, cap),
              slice::from_raw_parts_mut(out_kind, cap), slice::from_raw_parts_mut(out_ln, cap)))
    } else {
        None
    };
    let walked = catch_unwind(AssertUnwindSafe(move || -> Option<usize> {
        let mut count = 0usize;
        let mut outs = outs;
        for m in 0..n {
            if ok[m] == 0 {
                continue;
            }
            let whole = chain(&ms, &eyes, m, |off, kind, ln| {
                if let Some((om, oo, ok_, ol)) = outs.as_mut() {
                    if count < om.len() {
                        om[count] = m as i64;
                        oo[count] = off;
                        ok_[count] = kind;
                        ol[count] = ln;
                    }
                }
                count += 1;
            })?;
            if outs.is_some() {
                if count > cap {
                    return None;
                }
                if !whole {
                    ok[m] = 0;
                }
            }
        }
        Some(count)
    }));
    match walked {
        Ok(Some(count)) => count as i64,
        _ => DEFER,
    }
}
