//! The dispatcher's product: the files in `/run/provision` that the installer units read
//! (SPEC §5). [`Outputs::new`] decides their contents from a valid recipe; [`Outputs::write`]
//! stages them in a sibling directory and renames it into place, so the directory holds
//! either the old set or the complete new one. `recipe.env`'s grammar and keys are
//! [`crate::envfile`]'s; `layout.json` is [`layout`]'s.
//!
//! To add an output: a file name and its contents in [`Outputs::new`] (and its key in
//! [`crate::envfile::FILE_KEYS`] if `recipe.env` names it).

pub mod layout;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::atomic::{Existing, PublishError, Staging};
use crate::disks::{Identity, Resolved};
use crate::envfile::{self, DEVICE_KEY, FIELD_KEYS, FILE_KEYS, SCHEMA_ID_KEY};
use crate::recipe::model::Valid;

/// Mode of every output file; the directory is 0700.
const FILE_MODE: u32 = 0o600;

/// One file of the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub name: &'static str,
    pub contents: Vec<u8>,
}

/// The complete set of outputs for one recipe, in the order they are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outputs {
    files: Vec<Output>,
}

/// Why the outputs could not be written (exit 73). Names the output, never its contents.
#[derive(Debug)]
pub enum WriteError {
    NotEmpty {
        dir: PathBuf,
    },
    /// The directory holds something the dispatcher did not write; it was left untouched.
    NotOurs {
        dir: PathBuf,
        why: String,
    },
    Io {
        output: String,
        source: io::Error,
    },
    /// A signal asked the dispatcher to stop; nothing new was published.
    Stopped,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::NotEmpty { dir } => write!(f, "{} exists and is not empty", dir.display()),
            WriteError::NotOurs { dir, why } => {
                write!(f, "{} is not an output set of the dispatcher ({why}); refusing to replace it", dir.display())
            }
            WriteError::Io { output, source } => write!(f, "cannot write {output}: {source}"),
            WriteError::Stopped => f.write_str("stopped before the outputs were complete; nothing was published"),
        }
    }
}

impl std::error::Error for WriteError {}

impl Outputs {
    /// The outputs of a valid recipe, for the directory `dir` (whose absolute paths
    /// `recipe.env` names). Validation made sure every env value is representable.
    /// `resolved`: what `target_disk` is on the machine (`run`; `render` resolves nothing):
    /// `TARGET_DISK_DEVICE` in `recipe.env`, the disk's identity in `layout.json`.
    pub fn new(valid: &Valid<'_>, schema_id: &str, dir: &Path, resolved: Option<&Resolved>) -> Outputs {
        let recipe = valid.recipe;
        let identity = resolved.and_then(|r| r.disk.as_ref()).map(Identity::from);
        let mut files: Vec<Output> = Vec::new();
        if let Some(partitions) = &valid.partitions {
            let layout = layout::render(recipe.target_disk, identity.as_ref(), partitions);
            files.push(Output { name: "layout.json", contents: layout });
        }
        for (text, name) in
            [(recipe.user_data, "user-data"), (recipe.unattend_xml, "unattend.xml"), (recipe.ks_cfg, "ks.cfg")]
        {
            if let Some(text) = text {
                files.push(Output { name, contents: text.as_bytes().to_vec() });
            }
        }
        if let Some(metadata) = valid.metadata {
            files.push(Output { name: "metadata.json", contents: format!("{metadata}\n").into_bytes() });
        }
        // The recipe exactly as the media gave it: fields this dispatcher does not interpret
        // (a newer controller's, under a schema version it knows) reach the target here,
        // never dropped (seed 002: "exactly as provided, no lossy transforms").
        files.push(Output { name: "recipe.json", contents: recipe.doc().text().as_bytes().to_vec() });
        let mut env: Vec<(&str, String)> =
            FIELD_KEYS.iter().filter_map(|(field, key)| Some((*key, recipe.string(field)?.to_owned()))).collect();
        env.extend(resolved.map(|r| (DEVICE_KEY, r.device.clone())));
        env.push((SCHEMA_ID_KEY, schema_id.to_owned()));
        for (name, key) in FILE_KEYS {
            if files.iter().any(|f| f.name == name) {
                env.push((key, dir.join(name).display().to_string()));
            }
        }
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        files.insert(0, Output { name: "recipe.env", contents: envfile::render(&pairs).into_bytes() });
        Outputs { files }
    }

    pub fn files(&self) -> &[Output] {
        &self.files
    }

    /// Writes the set to `dir`: staged beside it, each file fsynced with mode 0600, the
    /// directory (0700) renamed into place. On failure nothing new is left behind. An existing
    /// `dir` is refused, or replaced only if it is an earlier output set ([`Existing`]).
    pub fn write(&self, dir: &Path, existing: Existing) -> Result<(), WriteError> {
        let io_error = |output: &str| {
            let output = output.to_owned();
            move |source| WriteError::Io { output, source }
        };
        let names: Vec<&str> = self.files.iter().map(|f| f.name).collect();
        let staging = Staging::new(dir, &names).map_err(io_error("the staging directory"))?;
        for file in &self.files {
            staging.write(file.name, &file.contents, FILE_MODE).map_err(io_error(file.name))?;
            crate::failpoint::hit("outputs.file-written");
            if crate::shutdown::stop_requested().is_some() {
                return Err(WriteError::Stopped);
            }
        }
        staging.publish(existing).map_err(|e| match e {
            PublishError::NotEmpty => WriteError::NotEmpty { dir: dir.to_owned() },
            PublishError::NotOurs(why) => WriteError::NotOurs { dir: dir.to_owned(), why },
            PublishError::Io(source) => WriteError::Io { output: dir.display().to_string(), source },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issues::Findings;
    use crate::recipe::model::Recipe;
    use crate::recipe::parse;

    fn outputs(recipe: &str) -> Outputs {
        let doc = parse(recipe.as_bytes().to_vec()).unwrap();
        let recipe = Recipe::view(&doc);
        let valid = Valid::new(&recipe, &Findings::default()).unwrap();
        Outputs::new(&valid, "https://shoal.dev/provisioner/recipe.schema.json", Path::new("/run/provision"), None)
    }

    fn names(outputs: &Outputs) -> Vec<&str> {
        outputs.files().iter().map(|f| f.name).collect()
    }

    #[test]
    fn only_the_files_a_recipe_implies() {
        let esxi = outputs(r#"{"task_target": "install-esxi.target", "ks_cfg": "x"}"#);
        assert_eq!(names(&esxi), ["recipe.env", "ks.cfg", "recipe.json"]);
        let env = String::from_utf8(esxi.files()[0].contents.clone()).unwrap();
        assert_eq!(
            env,
            "TASK_TARGET=\"install-esxi.target\"\n\
             RECIPE_SCHEMA_ID=\"https://shoal.dev/provisioner/recipe.schema.json\"\n\
             KS_CFG_FILE=\"/run/provision/ks.cfg\"\n\
             RECIPE_FILE=\"/run/provision/recipe.json\"\n"
        );
        let all = outputs(
            r#"{"task_target": "t.target", "partition_layout": [{"size": "1G", "type_guid": "8300"}],
                "user_data": "u", "unattend_xml": "w", "ks_cfg": "k", "metadata": {}}"#,
        );
        assert_eq!(
            names(&all),
            ["recipe.env", "layout.json", "user-data", "unattend.xml", "ks.cfg", "metadata.json", "recipe.json"]
        );
    }

    #[test]
    fn payloads_are_byte_for_byte() {
        let out = outputs(r#"{"task_target": "t.target", "user_data": "a\r\nb  \n\u0000é\t"}"#);
        assert_eq!(out.files()[1].contents, "a\r\nb  \n\0é\t".as_bytes());
    }
}
