const i = special_vars.index;
const n = src.data.count[i];
const pct = (100 * Number(value)).toFixed(1) + '% busy';
return n >= 0 ? n + ' events, ' + pct : pct;
