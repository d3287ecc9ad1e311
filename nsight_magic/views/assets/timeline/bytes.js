const b = Number(value);
if (!(b > 0)) return '-';
const i = special_vars.index;
const us = src.data.dur_us[i];
const size = b >= 1048576 ? (b / 1048576).toFixed(2) + ' MiB' : b >= 1024 ? (b / 1024).toFixed(1) + ' KiB'
  : b.toFixed(0) + ' B';
return us > 0 ? size + ', ' + (b / (us * 1e3)).toFixed(2) + ' GB/s' : size;
