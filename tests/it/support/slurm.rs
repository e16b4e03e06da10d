//! A real single-node Slurm cluster per test, on the loopback: its own
//! `slurmctld` and `slurmd` (started by hand, in the foreground, as the
//! test's children) on two free ports, with its own state and spool
//! folders and its own `slurm.conf`, so that tests run side by side and a
//! test may restart its controller. They share the machine's `munged`
//! (CI's `.ci/run` starts it; outside CI one is started here if none runs).
//!
//! `ProctrackType=proctrack/linuxproc` and `TaskPlugin=task/none` keep
//! cgroups out of it. Without Slurm installed the tests say SKIPPED,
//! except in CI (`CI=true`), where they fail.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{say, secs, wait_until};

static SERIAL: AtomicUsize = AtomicUsize::new(0);

pub struct Cluster {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    pub conf: PathBuf,
    pub node: String,
    ctld: Option<Child>,
    slurmd: Option<Child>,
}

/// Why Slurm cannot be had here, if it cannot.
fn missing() -> Option<String> {
    for tool in [
        "slurmctld",
        "slurmd",
        "sbatch",
        "squeue",
        "scancel",
        "scontrol",
        "munge",
    ] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!(
                "{tool} is not installed (Debian: slurm-wlm, munge)"
            ));
        }
    }
    if !nix::unistd::geteuid().is_root() {
        return Some("the test cluster's daemons run as root".into());
    }
    None
}

/// Is `munged` answering? Start one if not.
fn ensure_munge() -> Result<(), String> {
    let works = || {
        Command::new("sh")
            .arg("-c")
            .arg("munge -n | unmunge >/dev/null 2>&1")
            .status()
            .is_ok_and(|s| s.success())
    };
    if works() {
        return Ok(());
    }
    let started = Command::new("sh")
        .arg("-c")
        .arg("install -d -o munge -g munge -m 755 /run/munge && runuser -u munge -- /usr/sbin/munged")
        .status()
        .map_err(|e| format!("starting munged: {e}"))?;
    if !started.success() {
        return Err(format!("munged did not start ({started})"));
    }
    super::poll_until(secs(5), super::POLL, || works().then_some(()))
        .ok_or_else(|| "munged does not answer".to_owned())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    /// A cluster up with its node idle; `None` (said) when Slurm is not
    /// installed here, a failure in CI.
    pub fn up_or_skip() -> Option<Cluster> {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if let Some(why) = missing() {
            if ci {
                panic!("Slurm is needed in CI: {why}");
            }
            say(&format!("SKIPPED: no Slurm here: {why}"));
            return None;
        }
        if let Err(why) = ensure_munge() {
            if ci {
                panic!("munge is needed in CI: {why}");
            }
            say(&format!("SKIPPED: no munge here: {why}"));
            return None;
        }
        Some(Cluster::up())
    }

    fn up() -> Cluster {
        let tmp = tempfile::Builder::new()
            .prefix("jw-slurm-")
            .tempdir()
            .expect("tempdir");
        let dir = tmp.path().to_path_buf();
        for sub in ["ctld", "spool", "log"] {
            fs::create_dir_all(dir.join(sub)).expect("mkdir");
        }
        let n = SERIAL.fetch_add(1, Ordering::SeqCst);
        let node = format!("jw{}n{n}", std::process::id());
        let (ctld_port, node_port) = (free_port(), free_port());
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        fs::write(
            &conf,
            format!(
                "ClusterName=jw{n}\n\
                 SlurmctldHost=localhost(127.0.0.1)\n\
                 SlurmUser=root\nSlurmdUser=root\n\
                 AuthType=auth/munge\nCredType=cred/munge\n\
                 StateSaveLocation={d}/ctld\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
                 SlurmctldPort={ctld_port}\nSlurmdPort={node_port}\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
                 JobCompType=jobcomp/none\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 SchedulerType=sched/backfill\nSchedulerParameters=batch_sched_delay=0\n\
                 MpiDefault=none\nReturnToService=2\nMinJobAge=600\nMailProg=/bin/true\n\
                 KillWait=2\nInactiveLimit=0\n\
                 NodeName={node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n\
                 PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO\n"
            ),
        )
        .expect("write slurm.conf");
        let mut c = Cluster {
            _dir: tmp,
            dir,
            conf,
            node,
            ctld: None,
            slurmd: None,
        };
        c.start_ctld();
        let slurmd = c
            .command("slurmd")
            .args(["-D", "-N", &c.node])
            .stdout(Stdio::null())
            .stderr(log_file(&c.dir, "slurmd.out"))
            .spawn()
            .expect("start slurmd");
        c.slurmd = Some(slurmd);
        wait_until("the Slurm node to be idle", secs(30), || {
            let out = c.run("sinfo", &["-h", "-N", "-o", "%T"]);
            (out.trim() == "idle").then_some(())
        });
        c
    }

    /// A Slurm command using this cluster's config.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        cmd
    }

    /// Run a Slurm client: its stdout (empty when it failed).
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        self.command(program)
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    fn start_ctld(&mut self) {
        let ctld = self
            .command("slurmctld")
            .args(["-D", "-i"])
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir, "slurmctld.out"))
            .spawn()
            .expect("start slurmctld");
        self.ctld = Some(ctld);
        wait_until("slurmctld to answer", secs(30), || {
            self.run("scontrol", &["ping"]).contains("UP").then_some(())
        });
    }

    /// Stop the controller (SIGTERM, as an operator's restart does) and
    /// start it again on its saved state.
    pub fn restart_ctld(&mut self) {
        self.stop_ctld();
        self.start_ctld();
    }

    /// Stop the controller and wait for it to exit.
    pub fn stop_ctld(&mut self) {
        if let Some(mut ctld) = self.ctld.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(ctld.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = ctld.wait();
        }
    }

    /// `squeue` lines for every job (`%i|%T|%j`), for a test's messages.
    pub fn queue(&self) -> String {
        self.run("squeue", &["-h", "-t", "all", "-o", "%i|%T|%j|%N"])
    }

    /// What `scontrol show job` says of Slurm job `id`.
    pub fn show(&self, id: &str) -> String {
        self.run("scontrol", &["show", "job", "-o", id])
    }

    /// The controller's and the node's logs, for a failing test.
    pub fn logs(&self) -> String {
        [
            "log/slurmctld.log",
            "log/slurmd.log",
            "slurmctld.out",
            "slurmd.out",
        ]
        .iter()
        .map(|f| {
            let text = fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            format!(
                "== {f}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    }

    pub fn conf_path(&self) -> &Path {
        &self.conf
    }
}

fn log_file(dir: &Path, name: &str) -> Stdio {
    fs::File::create(dir.join(name))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every job of this cluster cancelled and gone first, so that no
        // step daemon outlives it (when its controller still answers).
        if self.ctld.is_some() {
            let _ = self.run(
                "scancel",
                &[
                    "--full",
                    "--signal=KILL",
                    &format!("--user={}", nix::unistd::getuid()),
                ],
            );
            let _ = self.run("scancel", &[&format!("--user={}", nix::unistd::getuid())]);
            super::poll_until(secs(10), super::POLL, || {
                let left = self.run(
                    "squeue",
                    &["-h", "-t", "pending,running,completing,suspended"],
                );
                left.trim().is_empty().then_some(())
            });
        }
        // Then the node, so that it kills what it still runs, then the
        // controller.
        for child in [self.slurmd.take(), self.ctld.take()].into_iter().flatten() {
            let mut child = child;
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let waited = super::poll_until(secs(10), super::POLL, || {
                child.try_wait().ok().flatten().map(drop)
            });
            if waited.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
