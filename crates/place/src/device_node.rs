//! The node of an I/O device, for numactl's device node specs (numactl(8): "Instead of a
//! number a node can also be: netdev:DEV, file:PATH, ip:HOST, block:PATH, pci:[seg:]bus:dev
//! [:func]"), found in sysfs the way libnuma 2.0.16's affinity.c finds it: the device's
//! `numa_node` file, for a network or block device through the PCI function its
//! `/sys/class/CLASS/DEV` link passes through (the first one on the path, as libnuma's
//! pattern picks it), else `/sys/class/CLASS/DEV/device/numa_node`; for a file, the block
//! device holding it; for a host, the network interface its route leaves by.

use numalab_core::NodeId;
use numalab_linux::sysroot::SysRoot;
use std::path::Path;

/// The spec forms, as numactl spells them.
const PREFIXES: [&str; 5] = ["netdev:", "ip:", "file:", "block:", "pci:"];

/// `Some((prefix, id))` where `item` is a device spec (`netdev:eth0` gives `("netdev:",
/// "eth0")`).
pub fn split_spec(item: &str) -> Option<(&'static str, &str)> {
    PREFIXES
        .iter()
        .find_map(|p| item.strip_prefix(p).map(|id| (*p, id)))
}

/// The node of the device `id` named by a spec of kind `prefix`; the error says what was
/// looked up where, and why it gave no node.
pub fn node_of(prefix: &str, id: &str, sys: &SysRoot) -> Result<NodeId, String> {
    match prefix {
        "netdev:" => class_node("net", id, sys),
        "block:" => class_node("block", id, sys),
        "pci:" => pci_node(id, sys),
        "file:" => file_node(id, sys),
        "ip:" => ip_node(id, sys),
        _ => Err(format!("'{prefix}' is not a device spec")),
    }
}

/// A `numa_node` file: the node, or why there is none (-1: the kernel does not know it, as
/// on most single-socket and virtual machines).
fn read_numa_node(path: &Path, what: &str) -> Result<NodeId, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the node of {what} ({}: {e})", path.display()))?;
    let n: i64 = text.trim().parse().map_err(|_| {
        format!(
            "cannot read the node of {what}: {} holds '{}'",
            path.display(),
            text.trim()
        )
    })?;
    if n < 0 {
        return Err(format!(
            "the kernel does not know the node of {what} ({} is {n})",
            path.display()
        ));
    }
    u16::try_from(n)
        .map(NodeId)
        .map_err(|_| format!("{what}: node {n} in {} is out of range", path.display()))
}

/// The PCI function directory in a `/sys/class/...` link target, as libnuma's pattern
/// `(/devices/pci[0-9a-fA-F:/]+\.[0-9]+)/` finds it: hex digits, colons and slashes after
/// `/devices/pci`, then `.FUNC/`.
fn pci_function_dir(target: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(at) = target[from..].find("/devices/pci") {
        let start = from + at;
        let rest = &target[start + "/devices/pci".len()..];
        let run = rest
            .find(|c: char| !(c.is_ascii_hexdigit() || c == ':' || c == '/'))
            .unwrap_or(rest.len());
        let after = &rest[run..];
        if run > 0 {
            if let Some(func) = after.strip_prefix('.') {
                let digits = func.find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
                if digits > 0 && func[digits..].starts_with('/') {
                    let end = start + "/devices/pci".len() + run + 1 + digits;
                    return Some(&target[start..end]);
                }
            }
        }
        from = start + 1;
    }
    None
}

/// `netdev:DEV` and `block:DEV` (libnuma's `affinity_class`).
fn class_node(class: &str, dev: &str, sys: &SysRoot) -> Result<NodeId, String> {
    let dev = dev.trim_start();
    if dev.contains(['/', '.']) {
        return Err(format!(
            "illegal characters in '{dev}' (a {class} device name)"
        ));
    }
    let link = sys.path(&format!("sys/class/{class}/{dev}"));
    if let Ok(target) = std::fs::read_link(&link) {
        if let Some(func) = pci_function_dir(&target.to_string_lossy()) {
            let path = sys.path(&format!("sys{func}/numa_node"));
            return read_numa_node(&path, &format!("{class} device '{dev}'"));
        }
    }
    let path = sys.path(&format!("sys/class/{class}/{dev}/device/numa_node"));
    read_numa_node(&path, &format!("{class} device '{dev}'"))
}

/// Hexadecimal fields of `s` separated as `seps` says (`:` then `.`, ...), as sscanf reads
/// `%x:%x.%x`: as many as match from the start.
fn hex_fields(s: &str, seps: &[char]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut rest = s;
    for i in 0..=seps.len() {
        let end = rest
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(rest.len());
        let Ok(v) = u32::from_str_radix(&rest[..end], 16) else {
            break;
        };
        out.push(v);
        rest = &rest[end..];
        match seps.get(i).and_then(|&c| rest.strip_prefix(c)) {
            Some(r) => rest = r,
            None => break,
        }
    }
    out
}

/// `pci:[seg:]bus:dev[.func]` (libnuma's `affinity_pci`): the function's `numa_node` under
/// its root bus.
fn pci_node(id: &str, sys: &SysRoot) -> Result<NodeId, String> {
    let full = hex_fields(id, &[':', ':', '.']);
    let (seg, bus, dev, func) = match full[..] {
        [s, b, d, f] => (s, b, d, f),
        [s, b, d] => (s, b, d, 0),
        _ => match hex_fields(id, &[':', '.'])[..] {
            [b, d, f] => (0, b, d, f),
            [b, d] => (0, b, d, 0),
            _ => {
                return Err(format!(
                    "cannot parse PCI device '{id}' (expected [seg:]bus:dev[.func], hexadecimal)"
                ))
            }
        },
    };
    let path = sys.path(&format!(
        "sys/devices/pci{seg:04x}:{bus:02x}/{seg:04x}:{bus:02x}:{dev:02x}.{func:x}/numa_node"
    ));
    read_numa_node(&path, &format!("PCI device '{id}'"))
}

/// `file:PATH` (libnuma's `affinity_file`): the block device holding PATH (or PATH itself,
/// a device node), found by its major:minor among `/sys/class/block`.
fn file_node(file: &str, sys: &SysRoot) -> Result<NodeId, String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let st = std::fs::metadata(file).map_err(|e| format!("cannot stat file {file}: {e}"))?;
    let ft = st.file_type();
    let dev = if ft.is_block_device() || ft.is_char_device() {
        st.rdev()
    } else {
        st.dev()
    };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let dir = sys.path("sys/class/block");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot enumerate block devices in {}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path().join("dev")) else {
            continue;
        };
        if text.trim() == format!("{major}:{minor}") {
            return class_node("block", &name, sys);
        }
    }
    Err(format!(
        "cannot find block device {major}:{minor} in sysfs for '{file}' (a file on tmpfs or \
         another virtual file system has none)"
    ))
}

/// `ip:HOST`: the interface the route to HOST leaves by. libnuma asks rtnetlink for the
/// route's output interface; numalab lets the kernel pick the route by connecting a UDP
/// socket (no packet is sent) and takes the interface holding the source address it chose:
/// the same interface for the plain routes libnuma handles (no multipath, no bonding).
fn ip_node(host: &str, sys: &SysRoot) -> Result<NodeId, String> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let addr = (host, 9)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("cannot resolve {host}: no address"))?;
    let bind = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let local = UdpSocket::bind(bind)
        .and_then(|s| s.connect(addr).and_then(|_| s.local_addr()))
        .map_err(|e| format!("no route to {host} ({addr}): {e}"))?
        .ip();
    let name = interface_with(local)
        .ok_or_else(|| format!("cannot find the interface holding {local} (route to {host})"))?;
    class_node("net", &name, sys)
}

/// The network interface holding `ip` (getifaddrs(3)).
fn interface_with(ip: std::net::IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = list;
    while !p.is_null() && found.is_none() {
        // SAFETY: `p` walks the list getifaddrs returned; its fields are valid until freeifaddrs.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: the address is a sockaddr of the family it says.
            let here = unsafe { sockaddr_ip(ifa.ifa_addr) };
            if here == Some(ip) {
                // SAFETY: ifa_name is a NUL-terminated interface name.
                let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
                found = Some(name.to_string_lossy().into_owned());
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// The IP address of an AF_INET or AF_INET6 sockaddr.
///
/// # Safety
/// `sa` points to a valid sockaddr whose size matches its family.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<std::net::IpAddr> {
    match (*sa).sa_family as i32 {
        libc::AF_INET => {
            let v4 = &*(sa as *const libc::sockaddr_in);
            Some(std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)).into())
        }
        libc::AF_INET6 => {
            let v6 = &*(sa as *const libc::sockaddr_in6);
            Some(std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sysfs with a NIC on node 1 (its link through a root port and a function), a disk
    /// whose node the kernel does not know, and a PCI function on node 2.
    struct Scratch(std::path::PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }

    fn fake_sysfs(name: &str) -> (Scratch, SysRoot) {
        let dir = Scratch(
            std::env::temp_dir().join(format!("numalab-device-node-{}-{name}", std::process::id())),
        );
        std::fs::remove_dir_all(&dir.0).ok();
        let root = dir.0.as_path();
        let mk = |p: &str, text: &str| {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        };
        mk("sys/devices/pci0000:00/0000:00:03.0/numa_node", "1\n");
        mk("sys/devices/pci0000:00/0000:00:05.0/numa_node", "-1\n");
        mk("sys/devices/pci0000:40/0000:40:01.2/numa_node", "2\n");
        std::fs::create_dir_all(root.join("sys/class/net")).unwrap();
        std::fs::create_dir_all(root.join("sys/class/block/vda")).unwrap();
        std::os::unix::fs::symlink(
            "../../devices/pci0000:00/0000:00:03.0/virtio0/net/eth0",
            root.join("sys/class/net/eth0"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "../../devices/virtual/net/lo",
            root.join("sys/class/net/lo"),
        )
        .unwrap();
        std::fs::remove_dir(root.join("sys/class/block/vda")).unwrap();
        std::os::unix::fs::symlink(
            "../../devices/pci0000:00/0000:00:05.0/virtio1/block/vda",
            root.join("sys/class/block/vda"),
        )
        .unwrap();
        let sys = SysRoot::new(root);
        (dir, sys)
    }

    #[test]
    fn devices_resolve_through_their_pci_function() {
        let (_d, sys) = fake_sysfs("pci");
        assert_eq!(node_of("netdev:", "eth0", &sys), Ok(NodeId(1)));
        assert_eq!(node_of("pci:", "0000:40:01.2", &sys), Ok(NodeId(2)));
        assert_eq!(node_of("pci:", "40:01.2", &sys), Ok(NodeId(2)));
        assert_eq!(node_of("pci:", "0:3", &sys), Ok(NodeId(1)));
        let e = node_of("block:", "vda", &sys).unwrap_err();
        assert!(
            e.contains("does not know the node of block device 'vda'"),
            "{e}"
        );
        let e = node_of("netdev:", "lo", &sys).unwrap_err();
        assert!(
            e.contains("net device 'lo'") && e.contains("device/numa_node"),
            "{e}"
        );
        let e = node_of("netdev:", "../x", &sys).unwrap_err();
        assert!(e.contains("illegal characters"), "{e}");
        let e = node_of("pci:", "zz", &sys).unwrap_err();
        assert!(e.contains("cannot parse PCI device"), "{e}");
    }

    #[test]
    fn libnumas_pattern_takes_the_first_pci_function_on_the_path() {
        assert_eq!(
            pci_function_dir("../../devices/pci0000:00/0000:00:1c.0/0000:02:00.0/net/eth1"),
            Some("/devices/pci0000:00/0000:00:1c.0")
        );
        assert_eq!(pci_function_dir("../../devices/virtual/net/lo"), None);
        assert_eq!(split_spec("netdev:eth0"), Some(("netdev:", "eth0")));
        assert_eq!(split_spec("0-3"), None);
    }

    #[test]
    fn a_file_on_a_virtual_file_system_has_no_block_device() {
        let (_d, sys) = fake_sysfs("file");
        let e = node_of("file:", "/proc/self/status", &sys).unwrap_err();
        assert!(e.contains("cannot find block device"), "{e}");
        let e = node_of("file:", "/nonexistent/x", &sys).unwrap_err();
        assert!(e.contains("cannot stat file"), "{e}");
    }

    #[test]
    fn the_loopback_route_leaves_by_lo() {
        let (_d, sys) = fake_sysfs("ip");
        // 127.0.0.1 routes out of lo, which is virtual: no node, and the error says lo
        let e = node_of("ip:", "127.0.0.1", &sys).unwrap_err();
        assert!(e.contains("'lo'"), "{e}");
    }
}
