//! A real OCI registry for tests: Docker Distribution 2.8 (Debian's
//! `docker-registry`), serving plain HTTP on a free loopback port with its
//! storage in a temporary directory and deletes enabled (so a test can make
//! a tag vanish). `.ci/run` installs it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The registry binary (`$REKON_DOCKER_REGISTRY`, else `docker-registry`).
fn binary() -> PathBuf {
    std::env::var_os("REKON_DOCKER_REGISTRY")
        .map_or_else(|| PathBuf::from("docker-registry"), PathBuf::from)
}

/// A running registry; killed when dropped.
#[derive(Debug)]
pub struct Registry {
    child: Option<Child>,
    addr: SocketAddr,
    config: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on a free loopback port.
    ///
    /// # Errors
    /// When `docker-registry` is not installed (install it: `apt-get
    /// install docker-registry`) or does not answer within 20 s.
    pub fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("rekon-registry-")
            .tempdir()?;
        let addr = crate::free_local_addr()?;
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage)?;
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                storage.display()
            ),
        )?;
        let log = dir.path().join("registry.log");
        let mut registry = Self {
            child: None,
            addr,
            config,
            log,
            _dir: dir,
        };
        registry.restart()?;
        Ok(registry)
    }

    /// `127.0.0.1:PORT`, as written in references.
    #[must_use]
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Stops the registry (its storage stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the registry again on the same port and storage, and waits
    /// until it answers.
    ///
    /// # Errors
    /// As [`Registry::start`].
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        let log = std::fs::File::create(&self.log)?;
        let child = Command::new(binary())
            .arg("serve")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| {
                format!(
                    "failed to start {} (install Debian's docker-registry: `apt-get install docker-registry`)",
                    binary().display()
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if crate::http_get(self.addr, "/v2/")
                .is_ok_and(|r| r.lines().next().is_some_and(|l| l.contains(" 200 ")))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "docker-registry did not answer on {} within 20 s; its log:\n{}",
                    self.addr,
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
