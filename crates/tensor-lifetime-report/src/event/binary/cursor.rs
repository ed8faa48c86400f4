//! Decoding a binary record's payload: varints, strings and the composite values
//! (sites, survivor summaries, roles), each checked against the bytes left.

use super::SITE_KINDS;
use crate::event::{HolderCount, HolderSpec, SiteInfo, SiteNote, SiteSweep};
use crate::roles::{Role, RoleBytes};

/// The payload left to decode.
pub(super) struct Cursor<'a> {
    pub(super) data: &'a [u8],
}

impl Cursor<'_> {
    pub(super) fn byte(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.data.split_first().ok_or("the record ends early")?;
        self.data = rest;
        Ok(b)
    }

    pub(super) fn u64(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err("a varint over 64 bits".to_string());
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint over 10 bytes".to_string())
    }

    pub(super) fn u32(&mut self) -> Result<u32, String> {
        let v = self.u64()?;
        u32::try_from(v).map_err(|_| format!("{v} where a 32-bit number belongs"))
    }

    /// A count of items of at least `min_bytes` each, checked against the bytes left.
    pub(super) fn count(&mut self, min_bytes: usize) -> Result<usize, String> {
        let n = self.u64()?;
        if n.saturating_mul(min_bytes as u64) > self.data.len() as u64 {
            return Err(format!("a count of {n} in {} bytes", self.data.len()));
        }
        Ok(n as usize)
    }

    /// A string in place: its length, then its bytes.
    pub(super) fn str(&mut self) -> Result<String, String> {
        let n = self.count(1)?;
        let (s, rest) = self.data.split_at(n);
        self.data = rest;
        std::str::from_utf8(s)
            .map(str::to_string)
            .map_err(|e| format!("a string: {e}"))
    }

    /// `N` optional values: a byte of presence bits, then the present values.
    pub(super) fn optionals<const N: usize>(&mut self) -> Result<[Option<u64>; N], String> {
        let flags = self.byte()?;
        if u32::from(flags) >> N != 0 {
            return Err(format!("presence bits {flags:#04x} for {N} values"));
        }
        let mut out = [None; N];
        for (i, v) in out.iter_mut().enumerate() {
            if flags & (1 << i) != 0 {
                *v = Some(self.u64()?);
            }
        }
        Ok(out)
    }
}

pub(super) fn site_info(c: &mut Cursor<'_>) -> Result<SiteInfo, String> {
    let file = c.str()?;
    let line = c.u32()?;
    let column = c.u32()?;
    let function = c.str()?;
    let label = c.str()?;
    let kind = c.byte()?;
    let kind = *SITE_KINDS
        .get(kind as usize)
        .ok_or_else(|| format!("a site kind {kind}"))?;
    let note = match c.byte()? {
        0 => None,
        1 => Some(SiteNote::Evicted {
            line: c.u32()?,
            call: c.str()?,
        }),
        2 => Some(SiteNote::Fills { holder: c.str()? }),
        n => return Err(format!("a site note {n}")),
    };
    let count = c.count(1)?;
    let mut from = Vec::with_capacity(count);
    for _ in 0..count {
        from.push(c.str()?);
    }
    Ok(SiteInfo {
        file,
        line,
        column,
        function,
        label,
        kind,
        note,
        from,
    })
}

fn role(index: u8) -> Result<Role, String> {
    Role::ALL
        .get(index as usize)
        .copied()
        .ok_or_else(|| format!("a role {index}"))
}

pub(super) fn site_sweep(c: &mut Cursor<'_>) -> Result<SiteSweep, String> {
    let site = c.u32()?;
    let mut v = [0u64; 10];
    for x in &mut v {
        *x = c.u64()?;
    }
    let role = match c.byte()? {
        0 => None,
        r => Some(role(r - 1)?),
    };
    let n = c.count(2)?;
    let mut holders = Vec::with_capacity(n);
    for _ in 0..n {
        let holder = match c.byte()? {
            0 => HolderSpec::Store { site: c.u32()? },
            1 => HolderSpec::Graph { site: c.u32()? },
            2 => HolderSpec::View { site: c.u32()? },
            3 => HolderSpec::Unknown,
            k => return Err(format!("a holder kind {k}")),
        };
        holders.push(HolderCount {
            holder,
            count: c.u64()?,
        });
    }
    let n = c.count(1)?;
    let call_paths = (0..n).map(|_| c.u32()).collect::<Result<_, _>>()?;
    let [survivors, bytes, iterations, first_iteration, last_iteration, refcount, graph_tensors, graph_bytes, view_bytes, view_storage_bytes] =
        v;
    Ok(SiteSweep {
        site,
        survivors,
        bytes,
        iterations,
        first_iteration,
        last_iteration,
        refcount,
        holders,
        graph_tensors,
        graph_bytes,
        view_bytes,
        view_storage_bytes,
        role,
        call_paths,
    })
}

pub(super) fn role_bytes(c: &mut Cursor<'_>) -> Result<RoleBytes, String> {
    Ok(RoleBytes {
        role: role(c.byte()?)?,
        bytes: c.u64()?,
        tensors: c.u64()?,
        temporary_bytes: c.u64()?,
        temporary_tensors: c.u64()?,
    })
}
