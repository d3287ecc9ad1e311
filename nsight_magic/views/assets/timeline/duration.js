const us = Number(value);
if (!isFinite(us)) return '';
if (us >= 1e6) return (us / 1e6).toFixed(3) + ' s';
if (us >= 1000) return (us / 1000).toFixed(3) + ' ms';
return us.toFixed(3) + ' µs';
