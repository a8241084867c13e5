//! A very small command-line parser: flags, `--name value` options and positional words.

use crate::Error;

/// The arguments of one task, consumed option by option.
#[derive(Debug)]
pub struct Args {
    rest: Vec<String>,
}

impl Args {
    /// Wraps the arguments that follow the task name.
    pub fn new(rest: Vec<String>) -> Args {
        Args { rest }
    }

    /// Removes `name` if present and says whether it was.
    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.rest.len();
        self.rest.retain(|a| a != name);
        self.rest.len() != before
    }

    /// Removes `name VALUE` or `name=VALUE` and returns the value.
    pub fn value(&mut self, name: &str) -> Result<Option<String>, Error> {
        let prefix = format!("{name}=");
        if let Some(i) = self.rest.iter().position(|a| a.starts_with(&prefix)) {
            let arg = self.rest.remove(i);
            return Ok(Some(arg[prefix.len()..].to_string()));
        }
        let Some(i) = self.rest.iter().position(|a| a == name) else {
            return Ok(None);
        };
        if i + 1 >= self.rest.len() || self.rest[i + 1].starts_with("--") {
            return Err(format!("`{name}` needs a value").into());
        }
        let value = self.rest.remove(i + 1);
        self.rest.remove(i);
        Ok(Some(value))
    }

    /// Like [`Args::value`], parsed as a whole number.
    pub fn number(&mut self, name: &str) -> Result<Option<u64>, Error> {
        match self.value(name)? {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("`{name}` takes a whole number, not `{v}`").into()),
        }
    }

    /// The positional words left; fails on an unknown option.
    pub fn finish(self) -> Result<Vec<String>, Error> {
        if let Some(unknown) = self.rest.iter().find(|a| a.starts_with('-')) {
            return Err(format!("unknown option `{unknown}`; see `cargo xtask help`").into());
        }
        Ok(self.rest)
    }

    /// Fails unless every argument was consumed.
    pub fn finish_empty(self) -> Result<(), Error> {
        let rest = self.finish()?;
        if let Some(extra) = rest.first() {
            return Err(format!("unexpected argument `{extra}`; see `cargo xtask help`").into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args {
        Args::new(s.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn flags_values_and_positionals() {
        let mut a = args("parse --seconds 3 --list render");
        assert!(a.flag("--list"));
        assert!(!a.flag("--list"));
        assert_eq!(a.number("--seconds").unwrap(), Some(3));
        assert_eq!(a.finish().unwrap(), vec!["parse", "render"]);

        let mut a = args("--fuzz-seconds=7");
        assert_eq!(a.number("--fuzz-seconds").unwrap(), Some(7));
        a.finish_empty().unwrap();
    }

    #[test]
    fn rejects_bad_input() {
        assert!(args("--seconds").number("--seconds").is_err());
        assert!(args("--seconds ten").number("--seconds").is_err());
        assert!(args("--nope").finish().is_err());
        assert!(args("extra").finish_empty().is_err());
    }
}
