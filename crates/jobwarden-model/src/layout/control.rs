//! Names under `control/`: the operator's standing orders to the daemon
//! (pause markers), written by `jobwarden pause` or any tool and read by
//! the daemon at start, on every change it is told of, and every tick.
//!
//! ```text
//! control/pause                     the whole daemon is paused
//! control/pause-profile/<profile>   jobs of one profile are paused
//! control/pause-project/<project>   jobs of one project are paused; '/'
//!                                   in the project written `%2F`, '%' `%25`
//! control/limit                     how many jobs run at once, set by hand
//! control/limit-profile/<profile>   how many of one profile's, set by hand
//! control/limit-project/<project>   how many of one project's (named as above)
//! ```

use std::path::PathBuf;

use super::{Layout, validate_project, validate_segment};

/// The longest file name the filesystems we run on accept.
const NAME_MAX: usize = 255;

impl Layout {
    /// `control/`: the folder of the operator's standing orders.
    pub fn control(&self) -> PathBuf {
        self.root().join("control")
    }

    /// The folders under the root that hold pause and limit markers.
    pub fn control_folders(&self) -> [PathBuf; 5] {
        [
            self.control(),
            self.profile_pauses(),
            self.project_pauses(),
            self.profile_limits(),
            self.project_limits(),
        ]
    }

    /// `control/limit`: the number of jobs that run at once, set by hand
    /// (in place of the config's `max_jobs`).
    pub fn daemon_limit(&self) -> PathBuf {
        self.control().join("limit")
    }

    /// `control/limit-profile/`: one marker per profile limited by hand.
    pub fn profile_limits(&self) -> PathBuf {
        self.control().join("limit-profile")
    }

    /// `control/limit-project/`: one marker per project limited by hand.
    pub fn project_limits(&self) -> PathBuf {
        self.control().join("limit-project")
    }

    /// `control/pause`: present while the whole daemon is paused.
    pub fn daemon_pause(&self) -> PathBuf {
        self.control().join("pause")
    }

    /// `control/pause-profile/`: one marker per paused profile.
    pub fn profile_pauses(&self) -> PathBuf {
        self.control().join("pause-profile")
    }

    /// `control/pause-project/`: one marker per paused project.
    pub fn project_pauses(&self) -> PathBuf {
        self.control().join("pause-project")
    }

    /// The marker of a paused profile; the name must be a valid segment
    /// (every profile name is).
    pub fn profile_pause(&self, profile: &str) -> Result<PathBuf, String> {
        validate_segment(profile).map_err(|e| format!("profile name {profile:?} {e}"))?;
        Ok(self.profile_pauses().join(profile))
    }

    /// The marker of a paused project (`acme/api`), one file whatever the
    /// depth: `acme%2Fapi`. The top of the inbox (`""`) cannot be paused on
    /// its own (pause the daemon instead).
    pub fn project_pause(&self, project: &str) -> Result<PathBuf, String> {
        if project.is_empty() {
            return Err("the project is empty: name a folder under inbox/ (`acme/api`), or pause the whole daemon".into());
        }
        validate_project(project)?;
        let name = project.replace('%', "%25").replace('/', "%2F");
        if name.len() > NAME_MAX {
            return Err(format!(
                "project {project:?} is too long to pause on its own ({} bytes as a file name, at most {NAME_MAX})",
                name.len()
            ));
        }
        Ok(self.project_pauses().join(name))
    }
}

/// The profile a file name in `control/pause-profile/` pauses, if it is a
/// valid profile name.
pub fn paused_profile(file_name: &str) -> Option<String> {
    validate_segment(file_name).ok()?;
    Some(file_name.to_owned())
}

/// The project a file name in `control/pause-project/` pauses, if it is
/// one [`Layout::project_pause`] could have written.
pub fn paused_project(file_name: &str) -> Option<String> {
    let mut out = String::with_capacity(file_name.len());
    let mut rest = file_name;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        out.push(match code {
            "2F" | "2f" => '/',
            "25" => '%',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    (!out.is_empty() && validate_project(&out).is_ok()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_markers_round_trip_one_file_per_project() {
        let l = Layout::new("/r");
        for project in ["acme", "acme/api", "100%/done", "a%2Fb"] {
            let path = l.project_pause(project).expect(project);
            assert_eq!(path.parent(), Some(l.project_pauses().as_path()));
            let name = path.file_name().and_then(|n| n.to_str()).expect("utf-8");
            assert_eq!(paused_project(name).as_deref(), Some(project), "{name}");
        }
        assert_ne!(
            l.project_pause("a/b").expect("a/b"),
            l.project_pause("a%2Fb").expect("a%2Fb")
        );
    }

    #[test]
    fn bad_names_are_refused_both_ways() {
        let l = Layout::new("/r");
        for bad in ["", "../x", "a//b", "/abs", ".hidden", &"a".repeat(300)] {
            assert!(l.project_pause(bad).is_err(), "{bad:?}");
        }
        for bad in ["..", "-x", "a/b", ""] {
            assert!(l.profile_pause(bad).is_err(), "{bad:?}");
        }
        for bad in ["%", "%2", "%41", "..%2Fx", ".tmp", "a%2F", ""] {
            assert_eq!(paused_project(bad), None, "{bad:?}");
        }
        assert_eq!(paused_profile(".pause.1.0.tmp"), None);
        assert_eq!(paused_profile("review").as_deref(), Some("review"));
    }
}
