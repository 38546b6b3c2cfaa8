//! What text takes on a terminal, in columns rather than characters: two for an East Asian
//! wide character, none for a combining mark. Everything fitted to an 80-column console (the
//! banner, `disks`' table) is measured and cut here.

/// The columns `text` takes on a terminal. Counting characters instead, keys of wide
/// characters made the banner's 20 lines take 31 rows of an 80-column screen, and its title
/// scrolled off (issue 31); a disk's model did the same to `disks`' table (issue 40).
pub fn width(text: &str) -> usize {
    text.chars().map(char_width).sum()
}

/// A character's columns; a control character (printed escaped, never raw) counts one.
fn char_width(c: char) -> usize {
    unicode_width::UnicodeWidthChar::width(c).unwrap_or(1)
}

/// Cuts `line` to `columns` terminal columns, marking the cut with `...`; a wide character
/// that would straddle the edge goes whole.
pub fn cut(line: &mut String, columns: usize) {
    if width(line) > columns {
        let mut used = 0;
        let keep = line.find(|c| {
            used += char_width(c);
            used > columns.saturating_sub(3)
        });
        line.truncate(keep.unwrap_or(line.len()));
        line.push_str("...");
    }
}

/// `text` in exactly `columns` terminal columns: cut ([`cut`]) or padded with spaces.
pub fn fit(text: &str, columns: usize) -> String {
    let mut text = text.to_owned();
    cut(&mut text, columns);
    let pad = columns.saturating_sub(width(&text));
    text + &" ".repeat(pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_take_two_columns_and_combining_marks_none() {
        // A combining mark takes no column: e and U+0301 are one.
        let mut line = format!("{}{}", "e\u{301}".repeat(79), "xyz");
        assert_eq!(width(&line), 82);
        cut(&mut line, 80);
        assert_eq!((width(&line), line.matches('\u{301}').count()), (80, 77), "{line}");
        let mut line = "設".repeat(41);
        cut(&mut line, 80);
        assert_eq!(line, format!("{}...", "設".repeat(38)), "no wide character split over the edge");
    }

    #[test]
    fn a_cell_is_fitted_to_its_columns() {
        assert_eq!(fit("sdb", 8), "sdb     ");
        assert_eq!(fit("東芝製", 8), "東芝製  ");
        assert_eq!(fit("東芝製ハード", 8), "東芝... ");
        assert_eq!(fit("Samsung SSD 860", 9), "Samsun...");
        assert_eq!(width(&fit("東芝製ハードディスク", 9)), 9);
    }
}
