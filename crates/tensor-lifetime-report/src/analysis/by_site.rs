//! Entries by site in one vector sorted by site: found by binary search, walked in site
//! order. A loop has a handful of sites with series or verdicts, and entries of a few
//! hundred bytes: a vector is one allocation of what it holds, where a map's first node
//! holds eleven entries.

/// Entries by site, in site order.
#[derive(Debug)]
pub(super) struct BySite<T>(pub(super) Vec<(u32, T)>);

impl<T> Default for BySite<T> {
    fn default() -> Self {
        BySite(Vec::new())
    }
}

impl<T> BySite<T> {
    /// Where `site` is (`Ok`), or where it would go (`Err`).
    #[inline]
    pub(super) fn find(&self, site: u32) -> Result<usize, usize> {
        self.0.binary_search_by_key(&site, |(s, _)| *s)
    }

    pub(super) fn get(&self, site: u32) -> Option<&T> {
        self.find(site).ok().map(|at| &self.0[at].1)
    }

    /// Sets `site`'s entry to `value`, replacing the one it had.
    pub(super) fn insert(&mut self, site: u32, value: T) {
        match self.find(site) {
            Ok(at) => self.0[at].1 = value,
            Err(at) => self.0.insert(at, (site, value)),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.0.iter().map(|(s, v)| (*s, v))
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// Keeps the entries for which `keep` says true, in site order.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(u32, &mut T) -> bool) {
        self.0.retain_mut(|(s, v)| keep(*s, v));
    }
}

impl<T> IntoIterator for BySite<T> {
    type Item = (u32, T);
    type IntoIter = std::vec::IntoIter<(u32, T)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::BySite;

    #[test]
    fn entries_stay_in_site_order_and_a_second_insert_replaces() {
        let mut m = BySite::default();
        for (site, v) in [(7, "g"), (2, "b"), (9, "i"), (2, "B"), (5, "e")] {
            m.insert(site, v);
        }
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [(2, &"B"), (5, &"e"), (7, &"g"), (9, &"i")]
        );
        assert_eq!(m.get(7), Some(&"g"));
        assert_eq!(m.get(3), None);
        assert_eq!(m.find(6), Err(2));
    }

    #[test]
    fn retain_and_values_mut_keep_the_order() {
        let mut m = BySite::default();
        for site in [4, 1, 3, 2] {
            m.insert(site, site * 10);
        }
        m.values_mut().for_each(|v| *v += 1);
        m.retain(|site, v| {
            *v += 1;
            site % 2 == 0
        });
        assert_eq!(m.into_iter().collect::<Vec<_>>(), [(2, 22), (4, 42)]);
    }
}
