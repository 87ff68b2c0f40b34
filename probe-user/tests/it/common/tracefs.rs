//! Other tools' tracefs uprobe events, made by the tests that count them
//! (`uprobe_events`, as perf probe and hand-written ones are).

/// Where tracefs is mounted (probetop mounts it when absent).
pub(crate) fn root() -> &'static str {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .find(|r| std::path::Path::new(r).join("uprobe_events").exists())
        .expect("tracefs mounted (probetop mounts it when absent; mount -t tracefs nodev /sys/kernel/tracing)")
}

/// A uprobe event written to tracefs, enabled for ftrace, removed when dropped.
pub(crate) struct TracefsProbe {
    root: &'static str,
    group: &'static str,
    name: String,
    /// The trace instances it is enabled in, made for it (none: the top one).
    instances: Vec<std::path::PathBuf>,
}

impl TracefsProbe {
    /// Without arguments, enabled in the top trace instance.
    pub(crate) fn add(file: &std::path::Path, offset: u64, name: String) -> Self {
        Self::shaped(file, offset, name, "", 0)
    }

    /// [`add`](Self::add)ed at `function`'s entry in `file`.
    pub(crate) fn on(file: &std::path::Path, function: &str, name: String) -> Self {
        Self::add(file, super::file_offset(file, function), name)
    }

    /// With the fetched arguments `args`, enabled in `instances` trace instances of its
    /// own (0: the top one).
    pub(crate) fn shaped(
        file: &std::path::Path,
        offset: u64,
        name: String,
        args: &str,
        instances: usize,
    ) -> Self {
        let root = root();
        let group = "probetop_test";
        append(
            &format!("{root}/uprobe_events"),
            &format!("p:{group}/{name} {}:{offset:#x} {args}\n", file.display()),
        );
        let mut probe = Self {
            root,
            group,
            name,
            instances: Vec::new(),
        };
        if instances == 0 {
            std::fs::write(probe.enable(std::path::Path::new(root)), "1").expect("enable");
        }
        for n in 0..instances {
            let instance = std::path::Path::new(root).join(format!("instances/{}_{n}", probe.name));
            std::fs::create_dir(&instance).expect("a trace instance");
            probe.instances.push(instance.clone());
            std::fs::write(probe.enable(&instance), "1").expect("enable in the instance");
        }
        probe
    }

    fn enable(&self, instance: &std::path::Path) -> std::path::PathBuf {
        instance.join(format!("events/{}/{}/enable", self.group, self.name))
    }
}

impl Drop for TracefsProbe {
    fn drop(&mut self) {
        let _ = std::fs::write(self.enable(std::path::Path::new(self.root)), "0");
        for instance in &self.instances {
            let _ = std::fs::write(self.enable(instance), "0");
            let _ = std::fs::remove_dir(instance);
        }
        append(
            &format!("{}/uprobe_events", self.root),
            &format!("-:{}/{}\n", self.group, self.name),
        );
    }
}

fn append(path: &str, line: &str) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    file.write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("write {line:?} to {path}: {e}"));
}
