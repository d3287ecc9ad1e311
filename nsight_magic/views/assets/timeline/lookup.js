const s = (value >= 0 && value < table.length) ? table[value] : ''; return String(s);
