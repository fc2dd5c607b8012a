//! The build ids of the binaries a recording mapped, kept in the sample file's metadata so that
//! perf.data written from it carries them (`HEADER_BUILD_ID`): with them `perf report` can tell
//! that a binary on disk is still the one that ran, and find it (or the kernel's kallsyms) in
//! its build-id cache when it is not. perf itself reads them from the binaries when its
//! recording ends (`perf record`'s default; `--buildid-mmap` puts them into the mmap records
//! instead), which is what this does.
//!
//! ELF notes are read with the `object` crate. A binary without a GNU build-id note (or one
//! that is gone or unreadable by then) is left out, as perf leaves it out.

use numalab_analyze::record::{BuildId, Mapping, MappingKind};
use object::elf::{FileHeader64, NT_GNU_BUILD_ID};
use object::read::elf::NoteIterator;
use object::{Endianness, Object};
use std::collections::BTreeSet;
use std::path::Path;

/// perf's name for the running kernel among its binaries.
pub const KERNEL_DSO: &str = "[kernel.kallsyms]";

/// The GNU build id of the ELF file at `path`, read from its notes without loading the whole
/// file (`object`'s read cache fetches only the headers and note sections it needs).
pub fn of_elf_file(path: &Path) -> Option<Vec<u8>> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    elf.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// The build id in a raw sequence of ELF notes, as /sys/kernel/notes and
/// /sys/module/NAME/notes/.note.gnu.build-id hold them (4-byte aligned, the host's byte order).
pub fn of_notes(data: &[u8]) -> Option<Vec<u8>> {
    let mut notes =
        NoteIterator::<FileHeader64<Endianness>>::new(Endianness::default(), 4, data).ok()?;
    while let Ok(Some(note)) = notes.next() {
        if note.name() == b"GNU"
            && note.n_type(Endianness::default()) == NT_GNU_BUILD_ID
            && !note.desc().is_empty()
        {
            return Some(note.desc().to_vec());
        }
    }
    None
}

/// The running kernel's build id (/sys/kernel/notes), where the kernel exposes it.
pub fn of_running_kernel() -> Option<Vec<u8>> {
    of_notes(&std::fs::read("/sys/kernel/notes").ok()?)
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build ids of the executable file mappings among `mappings` (each file once, in path
/// order), then the running kernel's when `with_kernel` (the recording could sample kernel
/// code).
pub fn of_mappings(mappings: &[Mapping], with_kernel: bool) -> Vec<BuildId> {
    let files: BTreeSet<&str> = mappings
        .iter()
        .filter(|m| m.kind == MappingKind::Binary && m.name.starts_with('/'))
        .map(|m| m.name.as_str())
        .collect();
    let mut ids: Vec<BuildId> = files
        .into_iter()
        .filter_map(|path| {
            of_elf_file(Path::new(path)).map(|id| BuildId {
                path: path.to_string(),
                id_hex: hex(&id),
                kernel: false,
            })
        })
        .collect();
    if with_kernel {
        if let Some(id) = of_running_kernel() {
            ids.push(BuildId {
                path: KERNEL_DSO.to_string(),
                id_hex: hex(&id),
                kernel: true,
            });
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A note as the ELF ABI lays it out: namesz, descsz, type, then name and desc padded to 4.
    fn note(name: &[u8], n_type: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend((name.len() as u32 + 1).to_ne_bytes());
        v.extend((desc.len() as u32).to_ne_bytes());
        v.extend(n_type.to_ne_bytes());
        v.extend(name);
        v.push(0);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v.extend(desc);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn the_gnu_build_id_note_is_found_among_others() {
        let id: Vec<u8> = (1..=20).collect();
        let mut data = note(b"Xen", 6, &[1, 2, 3, 4, 5, 6, 7, 8]);
        data.extend(note(b"GNU", 1, &[0; 16])); // an ABI tag, not the id
        data.extend(note(b"GNU", NT_GNU_BUILD_ID, &id));
        assert_eq!(of_notes(&data), Some(id));
    }

    #[test]
    fn notes_without_an_id_or_cut_short_give_none() {
        assert_eq!(of_notes(&note(b"Linux", NT_GNU_BUILD_ID, &[9; 20])), None);
        let data = note(b"GNU", NT_GNU_BUILD_ID, &[9; 20]);
        assert_eq!(of_notes(&data[..data.len() - 8]), None);
        assert_eq!(of_notes(&[]), None);
    }

    #[test]
    fn an_executable_of_this_host_has_the_id_readelf_prints() {
        // The test binary itself: rustc links with the system linker, which Debian's gcc tells
        // to write a build id (--build-id); readelf, where installed, says which.
        let exe = std::env::current_exe().unwrap();
        let Some(id) = of_elf_file(&exe) else {
            panic!("no build id read from {}", exe.display())
        };
        assert!(id.len() >= 16, "{} bytes", id.len());
        if let Ok(out) = std::process::Command::new("readelf")
            .arg("-n")
            .arg(&exe)
            .output()
        {
            let text = String::from_utf8_lossy(&out.stdout);
            if let Some(line) = text.lines().find(|l| l.contains("Build ID:")) {
                assert_eq!(line.split_whitespace().last().unwrap(), hex(&id));
            }
        }
    }

    #[test]
    fn the_running_kernels_id_is_the_one_perf_reads() {
        // perf buildid-list -k prints the running kernel's id (from /sys/kernel/notes too);
        // without perf, or where /sys/kernel/notes is not readable, there is nothing to compare
        let Some(id) = of_running_kernel() else {
            eprintln!("SKIPPED: no build id in /sys/kernel/notes");
            return;
        };
        assert_eq!(id.len(), 20, "a GNU build id is a SHA-1");
        let Ok(out) = std::process::Command::new("perf")
            .args(["buildid-list", "-k"])
            .output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && !text.trim().is_empty() {
            assert_eq!(text.trim(), hex(&id));
        }
    }

    #[test]
    fn only_executable_files_are_read_and_a_vanished_file_is_left_out() {
        let exe = std::env::current_exe().unwrap();
        let m = |name: &str, kind| Mapping {
            task: 1,
            start: 0x1000,
            len_bytes: 4096,
            name: name.to_string(),
            kind,
            pgoff: 0,
        };
        let maps = vec![
            m(exe.to_str().unwrap(), MappingKind::Binary),
            m(exe.to_str().unwrap(), MappingKind::Binary), // a second segment of it
            m("/nonexistent/lib.so", MappingKind::Binary),
            m(exe.to_str().unwrap(), MappingKind::File),
            m("[heap]", MappingKind::Heap),
        ];
        let ids = of_mappings(&maps, false);
        assert_eq!(ids.len(), 1, "{ids:?}");
        assert_eq!(ids[0].path, exe.to_str().unwrap());
        assert!(!ids[0].kernel);
    }
}
