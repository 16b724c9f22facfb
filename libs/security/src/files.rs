//! Files reloaded when they change (identities, certificates, keys). Kubernetes updates a
//! mounted Secret by swapping a symlink, which file events report unreliably; reading the
//! few small files again every interval and comparing their bytes is simple and always
//! right.

use std::path::PathBuf;

/// A set of files and the contents last seen.
pub struct FileSet {
    paths: Vec<PathBuf>,
    seen: Option<Vec<Vec<u8>>>,
}

impl FileSet {
    pub fn new(paths: Vec<PathBuf>) -> FileSet {
        FileSet { paths, seen: None }
    }

    /// Reads every file; their contents if any differs from the last read (or on the first
    /// read), `None` if none does. A file that cannot be read now (being swapped) is an
    /// error, and the next call tries again.
    pub fn changed(&mut self) -> Result<Option<Vec<Vec<u8>>>, (PathBuf, std::io::Error)> {
        let mut contents = Vec::with_capacity(self.paths.len());
        for path in &self.paths {
            contents.push(std::fs::read(path).map_err(|e| (path.clone(), e))?);
        }
        if self.seen.as_ref() == Some(&contents) {
            return Ok(None);
        }
        self.seen = Some(contents.clone());
        Ok(Some(contents))
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_in_any_file_is_seen_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "1").expect("write");
        std::fs::write(&b, "2").expect("write");
        let mut files = FileSet::new(vec![a.clone(), b.clone()]);
        assert_eq!(
            files.changed().expect("read"),
            Some(vec![b"1".to_vec(), b"2".to_vec()])
        );
        assert_eq!(files.changed().expect("read"), None);
        std::fs::write(&b, "3").expect("write");
        assert_eq!(
            files.changed().expect("read"),
            Some(vec![b"1".to_vec(), b"3".to_vec()])
        );
        std::fs::remove_file(&a).expect("remove");
        assert_eq!(files.changed().expect_err("gone").0, a);
    }
}
