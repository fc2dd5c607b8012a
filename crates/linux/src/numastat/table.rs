//! numastat's text tables, cell for cell: fixed or fitted column widths with a one-space
//! gutter, rows and columns hidden when they hold no data (or only zeros, with `-z`), and
//! lines folded into sections where the screen is narrower than the table. Written by hand
//! because the point is numastat's exact layout (numactl's numastat.c, `display_table`), which
//! no table crate reproduces.

/// One cell. A repeated character (a rule) fills its column's width less the gutter.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// Nothing: does not count as data.
    Empty,
    /// A number, printed with its column's decimals.
    Num(f64),
    /// A label.
    Text(String),
    /// A rule of this character.
    Rule(char),
}

/// Where a cell's text sits in its column.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Justify {
    /// Padded on the right.
    Left,
    /// Padded on the left.
    Right,
    /// Padded on both sides (numastat's default).
    Center,
}

const GUTTER: usize = 1;

/// A table of `header_rows` + data rows by `header_cols` + data columns.
#[derive(Clone, Debug)]
pub struct Table {
    header_rows: usize,
    header_cols: usize,
    cells: Vec<Vec<Cell>>,
    /// Display order of the rows (sorting permutes it).
    order: Vec<usize>,
    always_show_row: Vec<bool>,
    width: Vec<usize>,
    decimals: Vec<usize>,
    justify: Vec<Justify>,
}

impl Table {
    /// An empty table; columns have width 0 until [`Table::column`] sets them.
    pub fn new(
        header_rows: usize,
        header_cols: usize,
        data_rows: usize,
        data_cols: usize,
    ) -> Table {
        let (rows, cols) = (header_rows + data_rows, header_cols + data_cols);
        Table {
            header_rows,
            header_cols,
            cells: vec![vec![Cell::Empty; cols]; rows],
            order: (0..rows).collect(),
            always_show_row: vec![false; rows],
            width: vec![0; cols],
            decimals: vec![0; cols],
            justify: vec![Justify::Center; cols],
        }
    }

    /// Rows, header rows included.
    pub fn rows(&self) -> usize {
        self.cells.len()
    }

    /// Columns, header columns included.
    pub fn cols(&self) -> usize {
        self.width.len()
    }

    /// Puts `cell` at (`row`, `col`).
    pub fn set(&mut self, row: usize, col: usize, cell: Cell) {
        self.cells[row][col] = cell;
    }

    /// Adds to a number cell (an empty one counts as 0).
    pub fn add(&mut self, row: usize, col: usize, v: f64) {
        let c = &mut self.cells[row][col];
        *c = Cell::Num(match c {
            Cell::Num(x) => *x + v,
            _ => v,
        });
    }

    /// Every data cell a number 0 (process tables start so: all their cells count as seen).
    pub fn zero_data(&mut self) {
        for r in self.header_rows..self.rows() {
            for c in self.header_cols..self.cols() {
                self.cells[r][c] = Cell::Num(0.0);
            }
        }
    }

    /// A column's width (gutter included), decimals and justification.
    pub fn column(&mut self, col: usize, width: usize, decimals: usize, justify: Justify) {
        self.width[col] = width;
        self.decimals[col] = decimals;
        self.justify[col] = justify;
    }

    /// Shows `row` even when it holds no data (the rule above a Total row).
    pub fn always_show(&mut self, row: usize) {
        self.always_show_row[row] = true;
    }

    /// The cell's text, cut to `max_width` bytes.
    fn text(&self, cell: &Cell, max_width: usize, decimals: usize) -> String {
        let mut s = match cell {
            Cell::Empty => String::new(),
            Cell::Num(v) => format!("{v:.decimals$}"),
            Cell::Text(t) => t.clone(),
            Cell::Rule(ch) => ch.to_string().repeat(max_width.saturating_sub(GUTTER)),
        };
        if s.len() > max_width {
            let mut cut = max_width;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        s
    }

    /// Fits a column to its widest cell plus the gutter, within [min, max].
    pub fn fit_width(&mut self, col: usize, min: usize, max: usize) {
        let mut w = min;
        for row in &self.cells {
            if !matches!(row[col], Cell::Rule(_)) {
                w = w.max(self.text(&row[col], max, self.decimals[col]).len());
            }
        }
        self.width[col] = (w + GUTTER).min(max);
    }

    /// Orders the data rows `first..=last` by column `col`, largest first, with numastat's
    /// selection sort (so that ties keep the order it gives them).
    pub fn sort_descending(&mut self, first: usize, last: usize, col: usize) {
        let value = |t: &Table, r: usize| match t.cells[r][col] {
            Cell::Num(v) => v,
            _ => 0.0,
        };
        for i in first..=last {
            let mut best = i;
            for j in i + 1..=last {
                if value(self, self.order[best]) < value(self, self.order[j]) {
                    best = j;
                }
            }
            self.order.swap(i, best);
        }
    }

    fn justified(&self, cell: &Cell, col: usize) -> String {
        let w = self.width[col];
        let t = self.text(cell, w, self.decimals[col]);
        let pad = w - t.len();
        match self.justify[col] {
            Justify::Left => format!("{t}{}", " ".repeat(pad)),
            Justify::Right => format!("{}{t}", " ".repeat(pad)),
            Justify::Center => {
                let left = pad.div_ceil(2);
                format!("{}{t}{}", " ".repeat(left), " ".repeat(pad - left))
            }
        }
    }

    /// The table as numastat prints it on a screen `screen_width` wide. Rows and columns that
    /// hold nothing are hidden; with `show_zeros` false, those holding only zeros too.
    pub fn render(&self, screen_width: usize, show_zeros: bool) -> String {
        let (rows, cols) = (self.rows(), self.cols());
        let mut row_seen = vec![false; rows];
        let mut row_nonzero = vec![false; rows];
        let mut col_seen = vec![false; cols];
        let mut col_nonzero = vec![false; cols];
        for r in self.header_rows..rows {
            for c in self.header_cols..cols {
                let cell = &self.cells[r][c];
                if matches!(cell, Cell::Empty | Cell::Rule(_)) {
                    continue;
                }
                row_seen[r] = true;
                col_seen[c] = true;
                if !matches!(cell, Cell::Num(v) if *v == 0.0) {
                    row_nonzero[r] = true;
                    col_nonzero[c] = true;
                }
            }
        }
        if !row_seen.iter().any(|s| *s) {
            return "Table has no data.\n".into();
        }
        if !row_nonzero.iter().any(|s| *s) && !show_zeros {
            return "Table has no non-zero data.\n".into();
        }
        let show_col = |c: usize| col_seen[c] && (show_zeros || col_nonzero[c]);
        let mut out = String::new();
        let mut first_section = true;
        let mut data_col = self.header_cols;
        while data_col < cols {
            if !show_col(data_col) {
                data_col += 1;
                continue;
            }
            if !first_section {
                out.push('\n');
            }
            first_section = false;
            // the first column of the next section; every row folds at the same place
            let mut next = data_col;
            for &row in &self.order {
                if row >= self.header_rows
                    && !self.always_show_row[row]
                    && (!row_seen[row] || (!show_zeros && !row_nonzero[row]))
                {
                    continue;
                }
                let mut line_width = 0;
                for c in 0..self.header_cols {
                    out.push_str(&self.justified(&self.cells[row][c], c));
                    line_width += self.width[c];
                }
                let mut c = data_col;
                loop {
                    if show_col(c) {
                        out.push_str(&self.justified(&self.cells[row][c], c));
                        line_width += self.width[c];
                    }
                    c += 1;
                    // numastat folds when the next column, shown or not, would not fit
                    if c >= cols || line_width + self.width[c] > screen_width {
                        break;
                    }
                }
                out.push('\n');
                next = c;
            }
            data_col = next.max(data_col + 1);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> Table {
        let mut t = Table::new(2, 1, 2, 3);
        t.column(0, 16, 0, Justify::Left);
        for (c, h) in ["Node 0", "Node 1", "Total"].iter().enumerate() {
            t.column(c + 1, 16, 2, Justify::Right);
            t.set(0, c + 1, Cell::Text(h.to_string()));
            t.set(1, c + 1, Cell::Rule('-'));
        }
        t.set(2, 0, Cell::Text("Numa_Hit".into()));
        t.set(3, 0, Cell::Text("Numa_Miss".into()));
        for (c, v) in [1.5, 2.25, 3.75].iter().enumerate() {
            t.set(2, c + 1, Cell::Num(*v));
            t.set(3, c + 1, Cell::Num(0.0));
        }
        t
    }

    #[test]
    fn a_wide_screen_gives_one_section_in_numastats_layout() {
        let out = two_nodes().render(10_000_000, true);
        assert_eq!(
            out,
            "                          Node 0          Node 1           Total\n\
             \x20                --------------- --------------- ---------------\n\
             Numa_Hit                    1.50            2.25            3.75\n\
             Numa_Miss                   0.00            0.00            0.00\n"
        );
    }

    #[test]
    fn zeros_are_hidden_with_z_and_narrow_screens_fold() {
        let out = two_nodes().render(10_000_000, false);
        assert!(!out.contains("Numa_Miss"), "{out}");
        // 16 + 16 + 16 = 48 fits, the Total column (64) does not: a second section.
        let out = two_nodes().render(50, true);
        let sections: Vec<&str> = out.split("\n\n").collect();
        assert_eq!(sections.len(), 2, "{out}");
        assert!(sections[0].contains("Node 1") && !sections[0].contains("Total"));
        assert!(
            sections[1].starts_with("                           Total\n"),
            "{out}"
        );
    }

    #[test]
    fn sorting_orders_data_rows_by_a_column_and_fitting_shrinks_columns() {
        let mut t = two_nodes();
        t.set(3, 3, Cell::Num(9.0));
        t.sort_descending(2, 3, 3);
        let out = t.render(10_000_000, true);
        let miss = out.find("Numa_Miss").unwrap();
        assert!(miss < out.find("Numa_Hit").unwrap(), "{out}");
        let mut t = two_nodes();
        for c in 1..4 {
            t.column(c, 16, 0, Justify::Right);
            t.fit_width(c, 4, 16);
        }
        t.fit_width(0, 4, 16);
        assert_eq!(
            t.render(10_000_000, true).lines().nth(2),
            Some("Numa_Hit        2      2     4")
        );
    }
}
