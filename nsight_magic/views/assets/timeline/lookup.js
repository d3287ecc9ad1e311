// an array, or a long table's names of the events shown: {code: name}, a Map in BokehJS
const s = table instanceof Map ? table.get(String(value)) : table[value];
return s == null ? '' : String(s);
